"""``python -m devserver``: run a standalone devserver with its JSON control API.

Prints the base URL, the CA path, a one-line ``caBundle`` and the control API address and
token, then serves until interrupted (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from devserver.control import ControlServer, apply_seed, server_info
from devserver.server import DevServer


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m devserver", description=__doc__)
    parser.add_argument("--path-prefix", default="", help="base path prefix, e.g. /hikyo")
    parser.add_argument("--port", type=int, default=0, help="main HTTPS port (0 = free)")
    parser.add_argument("--second-port", type=int, default=0, help="second HTTPS origin port")
    parser.add_argument("--control-port", type=int, default=0, help="control API port")
    parser.add_argument("--control-token", default=None, help="control API bearer (random)")
    parser.add_argument("--state-dir", type=Path, default=None, help="where ca.pem is written")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (a local node: 10.244.0.1)"
    )
    parser.add_argument("--seed", type=Path, default=None, help="JSON file to preload state")
    parser.add_argument("--strict-ids", action="store_true", help="400 on non-Hikyo path IDs")
    parser.add_argument("--json", action="store_true", help="print one JSON line of addresses")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every request")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    server = DevServer(
        args.path_prefix,
        strict_ids=args.strict_ids,
        port=args.port,
        second_port=args.second_port,
        state_dir=args.state_dir,
        host=args.host,
    )
    if args.seed is not None:
        apply_seed(server, json.loads(args.seed.read_text()))
    done = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: done.set())
    server.start()
    control = ControlServer(server, args.control_token, args.control_port).start()
    try:
        info = server_info(server) | {
            "control_url": control.url,
            "control_token": control.control_token,
        }
        if args.json:
            print(json.dumps(info), flush=True)
        else:
            print(f"url:           {info['url']}")
            print(f"second origin: {info['second_origin_url']}")
            print(f"CA path:       {info['ca_path']}")
            print(f"caBundle:      {info['ca_bundle']}")
            print(
                f"control API:   {info['control_url']} (Bearer {info['control_token']})", flush=True
            )
        while not done.wait(0.5):
            pass
    finally:
        control.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
