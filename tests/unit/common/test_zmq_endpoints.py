"""Which ZMQ endpoints may carry KV events (dspark_common/zmq_endpoints.py), and the directory of an
ipc one: loopback tcp or an absolute ipc path pass; a wildcard, another interface, a relative or too
long path are refused; a missing directory is made 0700, one others can reach is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark_common.zmq_endpoints import check_endpoint, ipc_path, private_ipc_dir
from gateway.config import Settings


@pytest.mark.parametrize(
    "endpoint",
    ["tcp://127.0.0.1:5557", "tcp://127.0.0.2:1", "tcp://localhost:5557", "tcp://[::1]:5557",
     "ipc:///run/dspark-kv/events"],
)  # fmt: skip
def test_loopback_and_an_absolute_ipc_path_pass(endpoint: str) -> None:
    assert check_endpoint(endpoint) == endpoint


@pytest.mark.parametrize(
    ("endpoint", "why"),
    [
        ("tcp://*:5557", "token ids"),
        ("tcp://0.0.0.0:5557", "token ids"),
        ("tcp://[::]:5557", "token ids"),
        ("tcp://10.0.0.2:5557", "token ids"),
        ("tcp://gateway.internal:5557", "token ids"),
        ("tcp://127.0.0.1", "ipc:///path or tcp://host:port"),
        ("inproc://events", "ipc:///path or tcp://host:port"),
        ("ipc://run/events", "absolute"),
        ("ipc:///run/*", "absolute"),
        ("ipc:///" + "d" * 107, "107 bytes"),
    ],
)
def test_what_others_could_reach_is_refused(endpoint: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        check_endpoint(endpoint)
    with pytest.raises(ValueError, match=why):  # the gateway's setting: refused at start
        Settings(upstream="http://127.0.0.1:8000", kv_events=endpoint)


def test_binding_an_ipc_endpoint_is_vllms() -> None:
    with pytest.raises(ValueError, match="vLLM binds"):
        Settings(
            upstream="http://127.0.0.1:8000", kv_events="ipc:///run/dspark-kv/events", kv_events_bind=True
        )


def test_the_directory_is_made_private_or_refused(tmp_path: Path) -> None:
    events = f"ipc://{tmp_path}/kv/deeper/events"
    private_ipc_dir(events)
    assert (tmp_path / "kv" / "deeper").stat().st_mode & 0o777 == 0o700
    private_ipc_dir(events)  # there already: left as it is
    (tmp_path / "kv" / "deeper").chmod(0o2750)
    private_ipc_dir(events)
    for mode in (0o755, 0o701, 0o1777):
        (tmp_path / "kv" / "deeper").chmod(mode)
        with pytest.raises(ValueError, match=f"{mode:04o}"):
            private_ipc_dir(events)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        private_ipc_dir(f"ipc://{tmp_path}/file/events")
    private_ipc_dir("tcp://127.0.0.1:5557")  # no directory to a port
    assert ipc_path("tcp://127.0.0.1:5557") is None and ipc_path(events) == tmp_path / "kv/deeper/events"
