"""``stability classroom``: the two servers a lecturer opens a class with, on one store.

    stability classroom                          # the room's view-only server on :8502, yours on 127.0.0.1:8501
    stability classroom --students run --operators ada@school.example   # students sign in and start their own

Note [Two servers]
------------------
A class needs the room to watch and the lecturer to control, and nothing a student sends to reach the
lecturer's controls.  So there are two Streamlit servers over the same run store:

* the **room's**, listening on every interface (``--address``, default 0.0.0.0) and view-only
  (``STABILITY_VIEW_ONLY=1``; with ``--operators`` or ``--students run|sweep``, the sign-in decides instead: Note
  [Roles] in stability/access/policy.py).  Its ``server.allowedHosts`` names this machine's addresses and
  host names only, so a page on another site that rebinds its own name to this machine gets no websocket
  (DNS rebinding);
* the **lecturer's**, on ``127.0.0.1`` only: whoever reaches it is on this machine, an operator.

Both are this package's ``app.py`` started with ``python -m streamlit run``; the command prints their
addresses, waits, and ends both on Ctrl-C or when either ends (they are its own children: nothing else is
signalled).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app.py"  # a checkout's app (pip install -e .)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


def add_command(commands, store) -> None:
    """``classroom [--port P] [--room-port P] [--address A] [--operators LIST] [--students view|run|sweep]``."""
    parser = commands.add_parser("classroom", parents=[store],
                                 help="open a class: a view-only server for the room and yours on this machine")
    parser.add_argument("--port", type=int, default=8501, help="your own server's port, on 127.0.0.1 (default 8501)")
    parser.add_argument("--room-port", type=int, default=8502, help="the room's server's port (default 8502)")
    parser.add_argument("--address", default="0.0.0.0",
                        help="the address the room's server listens on (default 0.0.0.0: every interface)")
    parser.add_argument("--operators", default="", metavar="LIST",
                        help="comma-separated identities (sign-in e-mails) who may control from the room's server")
    parser.add_argument("--students", choices=("view", "run", "sweep"), default="view",
                        help="'run': signed-in students start runs of their own within limits; 'sweep': runs and "
                             "sweeps (default: view)")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="another host name the room reaches this machine by (repeatable)")
    parser.set_defaults(handler=cmd_classroom)


def machine_hosts() -> list[str]:
    """The names and addresses this machine is reached by: its host names and every interface's address."""
    import psutil

    hosts = [*LOOPBACK_HOSTS, socket.gethostname(), socket.getfqdn(), f"{socket.gethostname()}.local"]
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                hosts.append(address.address.split("%")[0])  # an IPv6 link-local's zone is not in a Host header
    return list(dict.fromkeys(host for host in hosts if host))


def room_addresses(address: str, port: int) -> list[str]:
    """The links to give the class: the interface's own address, else every non-loopback IPv4 address."""
    import psutil

    if address not in ("0.0.0.0", "::", ""):
        return [f"http://{address}:{port}"]
    found = [entry.address for entries in psutil.net_if_addrs().values() for entry in entries
             if entry.family == socket.AF_INET and not entry.address.startswith("127.")]
    return [f"http://{ip}:{port}" for ip in found] or [f"http://{socket.gethostname()}:{port}"]


def server_commands(args, store: str | None) -> list[tuple[str, list[str], dict[str, str]]]:
    """(who, command, environment) of the two servers (Note [Two servers])."""
    base = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true"]
    after = ["--", "--store", store] if store else []
    hosts = machine_hosts() + list(args.allowed_host)
    room_env = {**os.environ, "STABILITY_OPERATORS": args.operators,
                "STABILITY_STUDENTS": args.students,
                "STABILITY_VIEW_ONLY": "0" if (args.operators or args.students != "view") else "1"}
    own_env = {**os.environ, "STABILITY_VIEW_ONLY": "0", "STABILITY_OPERATORS": "", "STABILITY_STUDENTS": ""}
    room = base + ["--server.address", args.address, "--server.port", str(args.room_port), *allowed(hosts)] + after
    own = base + ["--server.address", "127.0.0.1", "--server.port", str(args.port), *allowed(LOOPBACK_HOSTS)] + after
    return [("room", room, room_env), ("lecturer", own, own_env)]


def allowed(hosts) -> list[str]:
    """``server.allowedHosts`` as Streamlit's command line takes a list: the flag once a name."""
    return [word for host in hosts for word in ("--server.allowedHosts", host)]


def cmd_classroom(args) -> int:
    if not APP.is_file():
        raise ValueError(f"no app.py beside the package ({APP}): `stability classroom` runs from a checkout "
                         "installed with pip install -e .")
    for port in {args.port, args.room_port}:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                raise ValueError(f"port {port} is already in use: pick another with --port / --room-port")
    if args.port == args.room_port:
        raise ValueError("--port and --room-port must differ")
    store = args.store or os.environ.get("STABILITY_STORE")
    if store and "://" not in store:  # the servers start in the checkout, where .streamlit/config.toml is read
        store = str(Path(store).expanduser().absolute())
    children = [(who, subprocess.Popen(command, env=env, cwd=APP.parent))
                for who, command, env in server_commands(args, store)]
    room_mode = ("view-only" if not (args.operators or args.students != "view")
                 else "sign-in: " + ", ".join(filter(None, [args.operators and "operators " + args.operators,
                                                            args.students != "view" and f"students {args.students}"])))
    print(f"Class ({room_mode}): " + "  ".join(room_addresses(args.address, args.room_port)), flush=True)
    print(f"You (this machine only, full control): http://127.0.0.1:{args.port}", flush=True)
    print("Ctrl-C ends both.", flush=True)
    return _wait(children)


def _wait(children) -> int:
    """Until either server ends or Ctrl-C / SIGTERM; then end the other (ours) and return its status."""
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    code = 0
    try:
        while all(child.poll() is None for _, child in children):
            time.sleep(0.2)
        ended = [(who, child.returncode) for who, child in children if child.returncode is not None]
        code = ended[0][1] or 0
        print(f"stability classroom: the {ended[0][0]}'s server ended ({code}); ending the other.", file=sys.stderr)
    except KeyboardInterrupt:
        code = 0
    finally:
        for _, child in children:
            if child.poll() is None:
                child.terminate()
        for _, child in children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        signal.signal(signal.SIGTERM, previous)
    return code
