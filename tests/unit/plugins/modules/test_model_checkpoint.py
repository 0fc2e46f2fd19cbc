# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""main() of the model_checkpoint module: the size from the node's copy, else the hub's index fetched alone, else the
hub's file metadata; against a local HTTP server that answers as the hub does."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import model_checkpoint as mod

INDEX = {"metadata": {"total_size": 119 * 10**9}, "weight_map": {"w": "model-00001-of-00001.safetensors"}}
TREE = [{"type": "file", "path": "config.json", "size": 900},
        {"type": "file", "path": "model.safetensors", "size": 134, "lfs": {"size": 16 * 10**9}}]


class Hub(http.server.BaseHTTPRequestHandler):
    requests: list = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        Hub.requests.append((self.path, self.headers.get("Authorization")))
        if self.path.startswith("/gated/"):
            return self.answer(401, {"error": "Access to model gated/m is restricted."})
        if self.path == "/Qwen/Qwen3.5-122B-A10B-FP8/resolve/main/model.safetensors.index.json":
            return self.answer(200, INDEX)
        if self.path == "/api/models/org/single/tree/main?recursive=true":
            return self.answer(200, TREE)
        return self.answer(404, {"error": "Entry not found"})

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args):
        pass


@pytest.fixture
def hub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Hub.requests = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def run(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


def test_the_hubs_index_is_fetched_alone_before_any_download(tmp_path, capsys, hub):
    result = run(capsys, {"model": "Qwen/Qwen3.5-122B-A10B-FP8", "models_dir": str(tmp_path), "endpoint": hub,
                          "token": "hf_secret_token_value"})
    assert (result["total_bytes"], result["source"], result["error"]) == (
        119 * 10**9, "the hub's model.safetensors.index.json", "")
    assert Hub.requests == [("/Qwen/Qwen3.5-122B-A10B-FP8/resolve/main/model.safetensors.index.json",
                             "Bearer hf_secret_token_value")]
    assert result["changed"] is False and "hf_secret_token_value" not in json.dumps(result)
    assert result["local"]["exists"] is False and result["disk"]["path"] == str(tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_repository_without_an_index_is_sized_from_the_hubs_file_metadata(tmp_path, capsys, hub):
    result = run(capsys, {"model": "org/single", "models_dir": str(tmp_path), "endpoint": hub})
    assert (result["total_bytes"], result["source"]) == (16 * 10**9, "the hub's file metadata")
    assert [path for path, _auth in Hub.requests] == ["/org/single/resolve/main/model.safetensors.index.json",
                                                      "/api/models/org/single/tree/main?recursive=true"]


def test_a_gated_model_without_a_token_reports_the_status(tmp_path, capsys, hub):
    result = run(capsys, {"model": "gated/m", "models_dir": str(tmp_path), "endpoint": hub})
    assert (result["total_bytes"], result["status"], result["error"]) == (0, 401, "HTTP 401 Unauthorized")
    assert result["url"] == f"{hub}/gated/m/resolve/main/model.safetensors.index.json"


def test_an_unreachable_hub_reports_why(tmp_path, capsys):
    result = run(capsys, {"model": "org/m", "models_dir": str(tmp_path), "endpoint": "http://127.0.0.1:9",
                          "timeout": 5})
    assert result["total_bytes"] == 0 and result["status"] is None and result["error"]


def test_the_nodes_own_index_is_read_without_asking_the_hub(tmp_path, capsys, hub):
    copy = tmp_path / "Qwen3.5-122B-A10B-FP8"
    copy.mkdir()
    (copy / "model.safetensors.index.json").write_text(json.dumps(INDEX))
    result = run(capsys, {"model": "Qwen/Qwen3.5-122B-A10B-FP8", "models_dir": str(tmp_path), "endpoint": hub})
    assert (result["total_bytes"], result["source"]) == (119 * 10**9, f"{copy}/model.safetensors.index.json")
    assert result["local"]["complete"] is False and Hub.requests == []


def test_offline_without_an_index_leaves_the_size_unknown(tmp_path, capsys):
    result = run(capsys, {"model": "org/m", "models_dir": str(tmp_path), "fetch": False})
    assert result["total_bytes"] == 0 and result["url"] == ""
    assert "the hub is not asked" in result["error"]


def test_a_bad_model_id_fails(tmp_path, capsys):
    result = run(capsys, {"model": "../etc", "models_dir": str(tmp_path)})
    assert result["failed"] is True and "org/name" in result["msg"]
