"""Ray Serve against one `paraspec serve`, and Ray Serve across two hosts losing one:

    python benchmarks/ray_serve [--quick] [--model M] ...     # load.py: overhead, shared memory, load
    python benchmarks/ray_serve two-hosts [--requests 8] ...  # two_hosts.py: two netns "hosts", one lost

`python benchmarks/ray_serve two-hosts --help` (or without it, `--help`) for each one's flags.
One entry point for the folder; clients.py is load.py's clients (streamed, whole, the overhead probes).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if argv[:1] == ["two-hosts"]:
        import two_hosts

        return two_hosts.main(argv[1:])
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
    import load

    return load.main(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
