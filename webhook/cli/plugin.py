"""`kubectl vramgate …`: the same CLI installed as a kubectl plugin (an executable named kubectl-vramgate on PATH).

kubectl passes the arguments after the plugin name through unchanged, so `kubectl vramgate audit -A` is
`vramgate audit -A`; the cluster commands find credentials as kubectl itself does (webhook/kube/kubectl.py).
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from .main import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
