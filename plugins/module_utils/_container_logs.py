# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How every long-running container the collection starts keeps its logs: one fleet setting, checked here.

Docker's default log driver, ``json-file``, keeps a container's output in one file that grows without limit: a vLLM
engine that serves for weeks, logging every few seconds, or a gateway logging every request, fills the node's disk
(security review L4). The collection therefore starts the engine ranks (Ray head, Ray worker, ``mp`` rank), the
gateway and the doors, Prometheus, the node exporter and the watchdog with the same log settings, from the fleet
variable ``dgxspark_container_logs``:

* unset: ``json-file`` rotated at :data:`DEFAULT_OPTIONS` (5 files of 50 MB: at most 250 MB a container), so that
  ``docker logs`` and the collection's ``collect_logs`` keep working;
* ``{options: {...}}``: the same driver, with these options over the defaults (``max-size: 200m`` keeps 5 files; an
  option set to null drops the default);
* ``{driver: local}``: Docker's ``local`` driver, which rotates by itself (20 MB x 5, compressed) unless told otherwise;
* ``{driver: journald}`` (or ``syslog``, ``fluentd``, ...): the host's logging keeps the logs, and rotates them;
* ``json-file`` without ``max-size`` is refused: that is the unbounded file this setting exists to avoid.

The containers that ``docker run --rm`` starts for a check (the image gates, ``promtool``, ``haproxy -c``) and the
model download keep their output only until they end, and are left to Docker's defaults.
"""

from __future__ import annotations

import re
import typing as t

VARIABLE = "dgxspark_container_logs"
DEFAULT_DRIVER = "json-file"
DEFAULT_OPTIONS = {"max-size": "50m", "max-file": "5"}
# The drivers Docker ships. Those that keep files on the node rotate by their options; the others hand the lines to
# a collector (the host's journal, syslog, a log service) that keeps and rotates them.
FILE_DRIVERS = ("json-file", "local")
DRIVERS = FILE_DRIVERS + ("journald", "syslog", "fluentd", "gelf", "awslogs", "splunk", "gcplogs", "none")
_OPTION_NAME = re.compile(r"^[a-z][a-z0-9-]*(\.[a-z0-9-]+)*$")
_SIZE = re.compile(r"^[1-9][0-9]*[kmg]?$")
_COUNT = re.compile(r"^[1-9][0-9]{0,3}$")
KEYS = ("driver", "options")


class LogsError(ValueError):
    """A log setting Docker would refuse, or one that keeps no bound; the message says what and the fix."""


def _option(key, value) -> tuple[str, str]:
    name = str(key)
    if not _OPTION_NAME.match(name):
        raise LogsError(f"option {name!r:.60} is not a Docker log option name (lowercase words joined by '-' or '.', "
                        "e.g. max-size)")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise LogsError(f"option {name} is a {type(value).__name__}; give it as a string, e.g. '50m'")
    text = str(value)
    if not text or len(text) > 256 or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise LogsError(f"option {name} must be 1 to 256 printable characters")
    if name == "max-size" and not _SIZE.match(text):
        raise LogsError(f"option max-size is {text!r:.40}; give a size such as 50m (a number and k, m or g)")
    if name == "max-file" and not _COUNT.match(text):
        raise LogsError(f"option max-file is {text!r:.40}; give a count of files from 1 to 9999, e.g. '5'")
    return name, text


def container_logs(value: t.Any = None) -> dict[str, t.Any]:
    """VALUE (``dgxspark_container_logs``) as ``community.docker.docker_container``'s ``log_driver`` and
    ``log_options``. ``None`` or ``{}`` is the default. Raises :class:`LogsError`."""
    if value in (None, "", {}):
        value = {}
    if not isinstance(value, t.Mapping):
        raise LogsError(f"is a {type(value).__name__}; set it to a mapping such as "
                        "{driver: json-file, options: {max-size: 50m, max-file: '5'}}")
    unknown = sorted(str(k) for k in value if k not in KEYS)
    if unknown:
        raise LogsError(f"has {', '.join(unknown)}; it takes only driver and options")
    driver = value.get("driver")
    driver = DEFAULT_DRIVER if driver in (None, "") else driver
    if driver not in DRIVERS:
        raise LogsError(f"driver is {driver!r:.40}; set it to one of {', '.join(DRIVERS)}")
    given = value.get("options")
    given = {} if given in (None, "") else given
    if not isinstance(given, t.Mapping):
        raise LogsError(f"options is a {type(given).__name__}; set it to a mapping such as {{max-size: 50m}}")
    options = dict(DEFAULT_OPTIONS) if driver == DEFAULT_DRIVER else {}
    for key, option in given.items():
        if option is None:  # null removes a default (json-file's max-size: the refusal below)
            options.pop(str(key), None)
        else:
            options.update([_option(key, option)])
    if driver == "none" and options:
        raise LogsError("driver none keeps no logs and takes no options; remove options")
    if driver == "json-file" and "max-size" not in options:
        raise LogsError("driver json-file without max-size keeps one file that grows until the disk is full; set "
                        "options.max-size (e.g. 50m) or use driver local")
    return {"log_driver": driver, "log_options": options}
