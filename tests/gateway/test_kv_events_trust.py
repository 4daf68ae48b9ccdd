"""The KV event sockets trust no one but vLLM, through a real gateway (``dspark-gateway serve`` where
its start or its memory is what is measured) and real ZMQ publishers (pyzmq, vLLM's wire:
tests/support/kv_publisher.py): the gateway refuses at start an endpoint others can reach, and with
the runtime profile subscribes over a Unix socket in a private directory, so a forger on the old port
(``tcp://127.0.0.1:5557``) reaches nothing; where a loopback port is configured anyway, frames over
the bound cut their sender (counted, memory flat), blocks of another size and a batch numbered 0
that the replay socket does not confirm change nothing (counted in
``gateway_kv_events_ignored_total``), and a restart the replay confirms starts the index over."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest
import zmq

from dspark_common.kv_events import AllBlocksCleared
from gateway.app import create_app
from gateway.config import Settings
from tests.support.gateway_process import BIN, GatewayProcess, clean_env
from tests.support.kv_publisher import Publisher, payload, stored
from tests.support.prefix_cache_view import Served, feed, publish_until_taken
from tests.support.probes import scrape, wait_until
from tests.support.servers import free_port

BLOCK = 16
#: The endpoint the runtime profile had the gateway bind before: any local process could publish there.
OLD_ENDPOINT = "tcp://127.0.0.1:5557"


@pytest.fixture
def sim(start_sim):
    return start_sim()


def ignored(gateway: Served, reason: str) -> float:
    return scrape(gateway.url)[f"gateway_kv_events_ignored_total{{backend=default,reason={reason}}}"]


def test_an_endpoint_others_can_reach_is_refused_at_start(tmp_path: Path, database_url: str) -> None:
    """The old docs' example (every interface), and an ipc socket in a directory others may enter."""
    env = clean_env(database_url=database_url, upstream="http://127.0.0.1:9", kv_events="tcp://*:5557")
    run = subprocess.run(
        [BIN, "serve", "--port", str(free_port())], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0 and "every tenant's token ids" in run.stderr, run.stderr
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    settings = Settings(
        upstream="http://127.0.0.1:9", database_url=database_url, kv_events=f"ipc://{shared}/events"
    )
    with pytest.raises(ValueError, match="0755"):
        create_app(settings)


def test_the_runtime_profile_subscribes_over_a_private_socket_where_the_old_port_reaches_nothing(
    sim, start_gateway, admin: str, tmp_path: Path
) -> None:
    directory = tmp_path / "kv"  # missing: the gateway makes it, for its user only
    profile = tmp_path / "profile.env"
    profile.write_text(f"KV_EVENTS_DIR={directory}\nBLOCK_SIZE={BLOCK}\n")
    forger = zmq.Context.instance().socket(zmq.PUB)
    forger.connect(OLD_ENDPOINT)  # where vLLM connected before, to the port the gateway bound
    try:
        served = start_gateway(sim.url, runtime_profile=str(profile))
        assert directory.stat().st_mode & 0o777 == 0o700
        assert feed(served, admin)["endpoint"] == f"ipc://{directory}/events"
        with Publisher(f"ipc://{directory}/events", f"ipc://{directory}/replay") as vllm:
            for seq in range(100):  # a forger's blocks, numbered as the genuine ones will be
                forger.send_multipart((b"", seq.to_bytes(8, "big"), payload(stored(7, BLOCK, blocks=4))))
            last = publish_until_taken(vllm, served, admin)
            for seq in range(100):
                forger.send_multipart((b"", (last + 1 + seq).to_bytes(8, "big"), payload(stored(7, BLOCK))))
            last = publish_until_taken(vllm, served, admin, last + 1)
            taken = feed(served, admin)
        assert taken["blocks"] == last + 1 and taken["gaps"] == 0  # the publisher's, all of them: no other
        assert set(taken["ignored"].values()) == {0}
    finally:
        forger.close(linger=0)


def test_frames_over_the_bound_cut_their_sender_and_memory_stays_flat(
    sim, database_url: str, admin: str, tmp_path: Path
) -> None:
    """Four local processes flood a loopback port the gateway process binds (the weakest
    configuration) with 2 MiB frames, twice the default bound: libzmq cuts each connection before
    allocating the frame, so the gateway's memory does not follow; each cut is counted. Frames within
    the bound queue up to 32 MiB a connection, not without end. vLLM's batches still come."""
    events, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    env = clean_env(
        database_url=database_url, upstream=sim.url, kv_events=events, kv_events_replay=replay,
        kv_events_bind="true", kv_block_size=BLOCK,
    )  # fmt: skip
    served = GatewayProcess(env, tmp_path / "gateway.log").start(timeout_s=120)
    context = zmq.Context.instance()
    forgers: list[zmq.Socket] = []

    def connected() -> list[zmq.Socket]:
        """Four new forgers (the old ones still hold the frames they queued, each cut on its way)."""
        for forger in forgers:
            forger.close(linger=0)
        forgers[:] = [context.socket(zmq.PUB) for _ in range(4)]
        for forger in forgers:
            forger.connect(events)
        return forgers

    def read() -> float:  # frames within the bound that the feed took off its queue
        return ignored(served, "out_of_order")

    try:
        with Publisher(events, replay, connect=True) as vllm:  # its replay answers from the start
            before = served.rss_bytes()
            # numbered far ahead: never the next batch, and never confirmed by the replay
            seq, sent, frame = (1 << 62).to_bytes(8, "big"), 0, b"x" * (2 << 20)
            deadline = time.monotonic() + 60
            connected()
            while sent < 100 or ignored(served, "disconnected") < 8:
                assert time.monotonic() < deadline, f"{ignored(served, 'disconnected')} cuts within 60 s"
                for forger in forgers:
                    forger.send_multipart((b"", seq, frame))
                sent += 1
                time.sleep(0.01)
            assert served.rss_bytes() - before < 64 << 20
            assert feed(served, admin)["batches"] == 0 and read() == 0
            # the flood that took it to 5.9 GiB before: frames within the bound from every
            # connection, faster than they are read; each connection's queue holds 32 MiB of them
            sent, frame, deadline = 0, b"x" * (1 << 20), time.monotonic() + 60
            connected()
            while sent < 100 or read() < 20:
                assert time.monotonic() < deadline, f"{read()} frames read within 60 s"
                for _ in range(10):
                    for forger in forgers:
                        forger.send_multipart((b"", seq, frame))
                    sent += 1
                time.sleep(0.01)
            assert served.rss_bytes() - before < 256 << 20
            publish_until_taken(vllm, served, admin)
            assert feed(served, admin)["blocks"] >= 1
    finally:
        for forger in forgers:
            forger.close(linger=0)
        served.stop()


def test_blocks_of_another_size_and_an_unconfirmed_restart_change_nothing(
    sim, start_gateway, admin: str
) -> None:
    """Where any local process can publish (a loopback port the gateway binds): a 1-token block (which
    set the index's block size for good before) and a forged batch 0 (which cleared the index) are
    counted and ignored; vLLM's own restart, which its replay socket confirms, starts the index over."""
    events, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    served = start_gateway(
        sim.url, kv_events=events, kv_events_replay=replay, kv_events_bind=True, kv_block_size=BLOCK
    )
    forger = zmq.Context.instance().socket(zmq.PUB)
    forger.connect(events)
    try:
        with Publisher(events, replay, connect=True) as vllm:
            last = publish_until_taken(vllm, served, admin)
            blocks = feed(served, admin)["blocks"]
            assert blocks == last + 1

            vllm.publish(last + 1, payload(stored(1, 1, blocks=3), stored(9000, BLOCK)))
            wait_until(lambda: feed(served, admin)["last_seq"] == last + 1, 60, "the batch")
            assert feed(served, admin)["blocks"] == blocks + 1 and ignored(served, "block_size") == 1
            status = httpx.get(served.url + "/admin/status", headers={"Authorization": f"Bearer {admin}"})
            assert status.json()["backends"][0]["prefix_cache"]["block_size"] == BLOCK

            deadline = time.monotonic() + 60
            while ignored(served, "out_of_order") == 0:  # sent until the forger's subscription is up
                assert time.monotonic() < deadline, "the forged batch 0 was never received"
                forger.send_multipart((b"", (0).to_bytes(8, "big"), payload(AllBlocksCleared())))
                time.sleep(0.05)
            taken = feed(served, admin)
            assert taken["blocks"] == blocks + 1 and taken["publisher_restarts"] == 0
            assert taken["last_seq"] == last + 1

            vllm.restart()  # vLLM started again: its cache empty, its numbers from 0, its replay anew
            vllm.publish(0, payload(stored(5, BLOCK)))
            wait_until(lambda: feed(served, admin)["publisher_restarts"] == 1, 60, "the restart")
            taken = feed(served, admin)
            assert taken["blocks"] == 1 and taken["last_seq"] == 0
    finally:
        forger.close(linger=0)
