"""Run each Ray-native scenario with its feature off and on; print the table of docs/ray-native.md.

python examples/ray-native/compare.py [--plot docs/ray-native.png] [--json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kai_ray.sim.raynative import compare, markdown, plot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", type=Path, help="write the bar chart here (needs the 'plots' extra)")
    parser.add_argument("--json", action="store_true", help="print every row as JSON instead of the table")
    args = parser.parse_args()
    rows = compare(Path(__file__).resolve().parent)
    print(json.dumps([r.as_dict() for r in rows], indent=2) if args.json else markdown(rows))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
