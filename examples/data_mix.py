"""Blend two data sets 70/30 with exact proportions, save the position mid-epoch, resume exactly.

    python examples/data_mix.py [--short]

Writes a small set of tar shards ("web") and a folder of text files ("books") in a temporary
directory, mixes them with Pipeline.mix (70/30 in every window of 100 samples, a member that runs
out dropped and the other one continuing), prints the proportions of each window, then saves the
pipeline's state after 150 samples, restores it into a fresh pipeline and checks that the rest is
what an uninterrupted run yields. Runs in a second, with no network.
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
from pathlib import Path

from tensorcom import Pipeline, shards
from tensorcom.pipeline import PathSource, ShardSource
from tensorcom.pipeline.mix import member_counts


def make_data(root: Path, web: int, books: int) -> dict:
    """`web` samples in tar shards of 50 and `books` text files; the members of the mixture."""
    with shards.ShardWriter(str(root / "web-%03d.tar"), maxcount=50) as writer:
        for i in range(web):
            writer.write({"__key__": f"web{i:04d}", "txt": f"page {i}"})
    (root / "books").mkdir()
    for i in range(books):
        (root / "books" / f"book{i:04d}.txt").write_text(f"chapter {i}")
    return {"web": ShardSource(str(root / f"web-{{000..{(web - 1) // 50:03d}}}.tar"), shuffle=True),
            "books": PathSource(sorted(str(p) for p in (root / "books").iterdir()), shuffle=True)}


def mixture(members: dict) -> Pipeline:
    return Pipeline.mix(members, {"web": 0.7, "books": 0.3}, seed=1, policy="exact", window=100, on_end="drop")


def member_of(sample: dict) -> str:
    return "web" if Path(sample["__key__"]).name.startswith("web") else "books"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--short", action="store_true", help="a smaller data set (the tests run this)")
    args = parser.parse_args()
    web, books = (400, 150) if args.short else (2000, 800)
    with tempfile.TemporaryDirectory() as tmp:
        members = make_data(Path(tmp), web, books)
        whole = [s["__key__"] for s in mixture(members)]
        for start in range(0, 300, 100):
            counts = collections.Counter(member_of({"__key__": k}) for k in whole[start:start + 100])
            print(f"samples {start}-{start + 99}: web {counts['web']}, books {counts['books']}")
        print(f"epoch: {len(whole)} samples, every sample of both members once: {len(set(whole)) == web + books}")

        p = mixture(members)
        iterator = iter(p)
        before = [next(iterator)["__key__"] for _ in range(150)]
        state = json.dumps(p.state_dict())  # plain JSON: save it with your checkpoint
        print(f"saved after 150 samples: {member_counts(p.state_dict())}")
        resumed = mixture(members)
        resumed.load_state_dict(json.loads(state))
        after = [s["__key__"] for s in resumed]
        print(f"resumed: {len(after)} samples, the same as an uninterrupted run: {before + after == whole}")


if __name__ == "__main__":
    main()
