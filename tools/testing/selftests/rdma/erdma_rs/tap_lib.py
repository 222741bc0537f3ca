# SPDX-License-Identifier: GPL-2.0
"""TAP points as the tests' Python scripts print them (sgsi_bad.py,
smc_peer.py, compat_mismatch.py): "ok N - NAME: DETAIL" or "not ok N - ...",
one per check, which lib.sh's py_points and tap_points turn into points of
the calling test."""

results = []


def tap(name, ok, detail=""):
    """Prints one point and remembers whether it passed."""
    results.append(bool(ok))
    print(f"{'ok' if ok else 'not ok'} {len(results)} - {name}"
          f"{': ' + detail if detail else ''}", flush=True)


def status():
    """The exit status: 0 if at least one point was printed and all passed."""
    return 0 if results and all(results) else 1
