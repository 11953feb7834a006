"""The command line and the cluster it reaches (issue 41, item 12): every command that reads a
cluster fails in seconds, in its own words, on an address where no cluster answers or where
the cluster refuses this process (Ray's token authentication), and ``--address auto`` says
which cluster it found."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from topology.app.cli import main

#: The commands that read a cluster, with the arguments each needs besides --address.
READERS = [["status"], ["inspect", "q"], ["why", "q"], ["stop", "q"]]


def _cedar(args: list[str], env: dict[str, str] | None = None,
           timeout: float = 90) -> tuple[subprocess.CompletedProcess, float]:
    """``cedar ARGS`` in a fresh process (this one may be connected to Ray already)."""
    env = {k: v for k, v in (env or os.environ).items() if k != "RAY_ADDRESS"}
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "topology.app.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=REPO)
    return done, time.monotonic() - began


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- an address where no Ray cluster answers ------------------------------------------------

@pytest.mark.parametrize("command", READERS, ids=lambda c: c[0])
def test_an_unreachable_address_fails_in_seconds(command):
    done, took = _cedar([*command, "--address", f"127.0.0.1:{_free_port()}"])
    assert done.returncode == 2, done.stderr
    assert took < 15, took  # Ray alone retries for minutes
    assert done.stderr.startswith(f"cedar {command[0]}: cannot reach the Ray cluster")
    assert "Traceback" not in done.stderr


def test_something_else_answering_at_the_address_fails_in_seconds():
    # a port that takes connections and answers, but not as Ray's GCS: Ray alone printed 20
    # lines of "Failed to get cluster ID" over 22 s and a traceback
    server = socket.socket()
    server.bind(("", 0))  # every interface: Ray reads 127.0.0.1 as this node's own address
    server.listen()

    def answer() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            conn.close()

    threading.Thread(target=answer, daemon=True).start()
    try:
        done, took = _cedar(["status", "--address", f"127.0.0.1:{server.getsockname()[1]}"])
    finally:
        server.close()
    assert done.returncode == 2, done.stderr
    assert took < 15, took
    assert done.stderr.startswith("cedar status: ")
    assert "not as a Ray cluster" in done.stderr or "did not answer as a Ray" in done.stderr
    assert "6379" in done.stderr and "Traceback" not in done.stderr
    assert "Failed to get cluster ID" not in done.stderr  # Ray's own log lines kept off


# -- a cluster with token authentication ----------------------------------------------------

@pytest.fixture(scope="module")
def token_cluster():
    """A real Ray head with token authentication on (as Ray turns it on for a cluster a script
    starts), on a free port, in a temp dir of its own (so that no other test's ``--address
    auto`` finds it); its token in a file of its own. Stopped by signalling its ``ray start
    --block`` process group, never ``ray stop`` (which stops every Ray on the machine)."""
    from ray._private.authentication.authentication_token_generator import (
        generate_new_authentication_token,
    )
    from ray.util import get_node_ip_address

    base = Path(tempfile.mkdtemp(prefix="cedar-tok-"))  # short: Ray's socket paths must fit
    token = base / "auth_token"
    token.write_text(generate_new_authentication_token())
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    log = open(base / "head.log", "wb")  # noqa: SIM115 - closed below
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", "--port", str(port), "--num-cpus", "1",
         "--include-dashboard=false", "--disable-usage-stats",
         "--temp-dir", str(base / "ray")],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ip = get_node_ip_address()  # where Ray binds its GCS
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection((ip, port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or head.poll() is not None:
                    pytest.skip("a Ray head with token authentication did not start here: "
                                + (base / "head.log").read_text()[-2000:])
                time.sleep(0.5)
        time.sleep(2)  # the GCS takes connections before it answers
        yield f"{ip}:{port}", str(token)
    finally:
        # its own session: the head and every Ray process it started, and nothing else
        if head.poll() is None:
            os.killpg(head.pid, signal.SIGTERM)
            try:
                head.wait(timeout=5)
            except subprocess.TimeoutExpired:  # draining waits 30 s for a GCS it stopped
                os.killpg(head.pid, signal.SIGKILL)
                head.wait()
        log.close()
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("command", READERS, ids=lambda c: c[0])
def test_a_cluster_that_wants_a_token_is_named_with_the_fix(token_cluster, command):
    address, _ = token_cluster
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    done, took = _cedar([*command, "--address", address], env=env)
    assert done.returncode == 2, done.stderr
    assert took < 15, took  # was 22 s of InvalidAuthToken lines, then a traceback
    err = done.stderr
    assert err.startswith(f"cedar {command[0]}: the Ray cluster at ")
    assert "token authentication on" in err and "RAY_AUTH_MODE=token" in err
    assert "Traceback" not in err and err.count("InvalidAuthToken") == 1


@pytest.mark.slow
def test_with_the_token_the_same_command_reads_the_cluster(token_cluster):
    address, token = token_cluster
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN"}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token)
    done, _ = _cedar(["status", "--address", address], env=env)
    assert done.returncode == 0, done.stderr
    assert "no cedar queries are running" in done.stdout
    # another token than the cluster's: said so, not "send a token"
    wrong = os.path.join(os.path.dirname(token), "wrong_token")
    with open(wrong, "w") as f:
        f.write("0" * 32)
    env.update(RAY_AUTH_TOKEN_PATH=wrong)
    done, took = _cedar(["status", "--address", address], env=env)
    assert done.returncode == 2 and took < 15
    assert "refused this machine's token" in done.stderr and "Traceback" not in done.stderr


# -- which cluster --address auto found -------------------------------------------------------

@pytest.mark.ray
def test_address_auto_says_which_cluster_it_found(ray_session, capsys):
    import ray

    from operators.events import Cti, Insert
    from topology import Stream

    q = Stream.from_events([Insert("a", 0, 5, 1), Cti(5)]).deploy("cli-which", detached=False)
    try:
        assert main(["status"]) == 0
        captured = capsys.readouterr()
        found = [line for line in captured.err.splitlines() if "--address auto found" in line]
        assert len(found) == 1, captured.err
        line = found[0]
        assert f"the Ray cluster at {ray.get_runtime_context().gcs_address}" in line
        assert "started 20" in line and "cedar quer" in line
        # an explicit address: no such line
        assert main(["status", "--address", ray.get_runtime_context().gcs_address]) == 0
        assert "--address auto found" not in capsys.readouterr().err
    finally:
        q.stop()
