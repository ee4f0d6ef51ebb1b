"""A real S3 server for tests: Debian's Ceph RADOS gateway on a throwaway single-node cluster.

One monitor, one in-memory OSD (memstore) and radosgw, all bound to 127.0.0.1 under a temp
directory, with cephx off. Nothing is left running after `stop_fn()`.
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Callable

import httpx

REQUIRED_BINARIES = ("monmaptool", "ceph-authtool", "ceph-mon", "ceph-osd", "ceph", "radosgw", "radosgw-admin")
INSTALL_HINT = "apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd (or scripts/install_system_deps.sh)"

ACCESS_KEY = "kbtestaccesskey"
SECRET_KEY = "kbtestsecretkey0123456789"


class S3ServerError(RuntimeError):
    pass


def missing_binaries() -> list[str]:
    return [name for name in REQUIRED_BINARIES if shutil.which(name) is None]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_CONF = """\
[global]
fsid = {fsid}
mon host = [v2:127.0.0.1:{mon_port}]
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
# with cephx off, msgr2 must be told to use crc or the daemons refuse each other
ms mon client mode = crc
ms client mode = crc
ms cluster mode = crc
ms service mode = crc
ms bind msgr1 = false
run dir = {d}/run
admin socket = {d}/run/$name.asok
pid file = {d}/run/$name.pid
log file = {d}/log/$name.log
crash dir = {d}/crash
mon data = {d}/mon/$name
osd data = {d}/osd/$name
osd objectstore = memstore
memstore device bytes = 1073741824
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000

[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:{rgw_port}
rgw data = {d}/rgw
"""


def start_radosgw(tmpdir: Path | str, timeout_s: float = 120.0) -> tuple[str, str, str, Callable[[], None]]:
    """Start mon + osd + radosgw; return (endpoint "127.0.0.1:PORT", access_key, secret_key, stop_fn)."""
    missing = missing_binaries()
    if missing:
        raise S3ServerError(f"missing {', '.join(missing)}; install with: {INSTALL_HINT}")
    d = Path(tmpdir).resolve()
    for sub in ("run", "log", "crash", "mon/mon.a", "osd/osd.0", "rgw"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    fsid = str(uuid.uuid4())
    mon_port, rgw_port = _free_port(), _free_port()
    conf = d / "ceph.conf"
    conf.write_text(_CONF.format(fsid=fsid, mon_port=mon_port, rgw_port=rgw_port, d=d))
    base = ["-c", str(conf)]
    procs: list[subprocess.Popen] = []

    def run(*cmd: str) -> str:
        res = subprocess.run([cmd[0], *base, *cmd[1:]], capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            raise S3ServerError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
        return res.stdout

    def daemon(name: str, *cmd: str) -> None:
        log = open(d / "log" / f"{name}.stdout", "wb")
        procs.append(subprocess.Popen([cmd[0], *base, "-f", *cmd[1:]], stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
        log.close()

    def stop() -> None:
        # the cluster is throwaway (memstore), so a clean shutdown would only cost seconds
        for proc in reversed(procs):
            proc.kill()
            proc.wait()
        procs.clear()

    def wait_for(what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [p.args[0] for p in procs if p.poll() is not None]
            if dead:
                raise S3ServerError(f"{', '.join(dead)} exited while waiting for {what}; logs in {d / 'log'}")
            if check():
                return
            time.sleep(0.2)
        raise S3ServerError(f"timed out waiting for {what}; logs in {d / 'log'}")

    def osd_up() -> bool:
        stat = json.loads(run("ceph", "osd", "stat", "-f", "json"))
        return stat.get("num_up_osds", 0) >= 1

    def rgw_answers() -> bool:
        try:
            httpx.get(f"http://127.0.0.1:{rgw_port}/", timeout=1.0)
            return True
        except httpx.HTTPError:
            return False

    try:
        run("monmaptool", "--create", "--fsid", fsid, "--addv", "a", f"[v2:127.0.0.1:{mon_port}]",
            str(d / "monmap"))
        run("ceph-authtool", "--create-keyring", str(d / "mon.keyring"), "--gen-key", "-n", "mon.",
            "--cap", "mon", "allow *")
        run("ceph-mon", "--mkfs", "-i", "a", "--monmap", str(d / "monmap"), "--keyring", str(d / "mon.keyring"))
        daemon("mon.a", "ceph-mon", "-i", "a")
        osd_uuid = str(uuid.uuid4())
        osd_id = run("ceph", "osd", "new", osd_uuid).strip()
        run("ceph-osd", "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid)
        daemon("osd.0", "ceph-osd", "-i", osd_id)
        wait_for("the OSD to come up", osd_up)
        daemon("rgw", "radosgw", "-n", "client.rgw")
        wait_for("radosgw to answer HTTP", rgw_answers)
        run("radosgw-admin", "user", "create", "--uid", "kbtest", "--display-name", "kb test",
            "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY)
    except BaseException:
        stop()
        raise
    return f"127.0.0.1:{rgw_port}", ACCESS_KEY, SECRET_KEY, stop

