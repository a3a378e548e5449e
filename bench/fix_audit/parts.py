"""Split a held-out set's first-look sample into parts for readers, and merge their verdicts.

    python bench/fix_audit/parts.py split N SIZE    # /tmp/an/parts/hN_pK.{md,prompt}: edits grouped by repository
    python bench/fix_audit/parts.py merge N          # results/verdicts-heldoutN-first.json from /tmp/an/parts/hN_pK.json
    python bench/fix_audit/parts.py exclude          # /tmp/an/exclude.txt: the repositories choosers must avoid

Each part's prompt is ``prompts/judge.txt`` with its file names filled in; a reader who did not
write the rules is told only: "Read /tmp/an/parts/hN_pK.prompt and follow it exactly." The
repositories were chosen with ``prompts/choose.txt`` (DOMAIN and OUTFILE filled in) and fetched
into ``/tmp/fa_hN`` by ``run.py --keep /tmp/fa_hN``. Its exclusion list, ``/tmp/an/exclude.txt``,
holds every repository of ``SOURCES*.json`` here and of the recall corpus
(``bench/recall/labels*/*.json``, ``projects[].repo``): ``python bench/fix_audit/parts.py exclude``.
"""
from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTS = Path("/tmp/an/parts")


def split(n: int, size: int) -> None:
    sample = json.loads((HERE / "results" / f"sample-heldout{n}-first.json").read_text())["sample"]
    by_repo: dict[str, list[dict]] = collections.defaultdict(list)
    for edit in sample:
        by_repo[edit["repo"]].append(edit)
    parts: list[list[dict]] = []
    current: list[dict] = []
    for repo in sorted(by_repo, key=lambda r: -len(by_repo[r])):
        if current and len(current) + len(by_repo[repo]) > size:
            parts.append(current)
            current = []
        current += by_repo[repo]
    if current:
        parts.append(current)
    template = (HERE / "prompts" / "judge.txt").read_text()
    PARTS.mkdir(parents=True, exist_ok=True)
    for k, part in enumerate(parts):
        md = PARTS / f"h{n}_p{k}.md"
        with open(md, "w") as handle:
            for e in part:
                folder = e["repo"].replace("/", "+")
                handle.write(
                    f"## {e['id']}\n\n{e['code']} ({e['applicability']}): {e['description']}; {e['test_or_package']} code\n"
                    f"original: /tmp/fa_h{n}/{folder}/{e['path']}\nfixed:    /tmp/fa_h{n}/fixed/{folder}/{e['path']}\n\n"
                    f"```diff\n{e['hunk']}```\n\n"
                )
        prompt = template.replace("{MD}", str(md)).replace("{OUT}", str(PARTS / f"h{n}_p{k}.json")).replace("{COUNT}", str(len(part)))
        (PARTS / f"h{n}_p{k}.prompt").write_text(prompt)
        print(n, k, len(part), sorted({e["repo"] for e in part}))


def merge(n: int) -> None:
    verdicts: dict[str, dict] = {}
    for path in sorted(PARTS.glob(f"h{n}_p*.json")):
        verdicts.update(json.loads(path.read_text()))
    ids = [e["id"] for e in json.loads((HERE / "results" / f"sample-heldout{n}-first.json").read_text())["sample"]]
    missing = [i for i in ids if i not in verdicts]
    if missing:
        sys.exit(f"not judged: {missing}")
    (HERE / "results" / f"verdicts-heldout{n}-first.json").write_text(json.dumps({i: verdicts[i] for i in ids}, indent=1) + "\n")


def exclude() -> None:
    repos = {r["repo"].lower() for path in HERE.glob("SOURCES*.json") for r in json.loads(path.read_text())}
    for path in (HERE.parent / "recall").glob("labels*/*.json"):
        repos |= {p["repo"].lower() for p in json.loads(path.read_text()).get("projects", [])}
    Path("/tmp/an").mkdir(parents=True, exist_ok=True)
    Path("/tmp/an/exclude.txt").write_text("\n".join(sorted(repos)) + "\n")
    print(len(repos), "repositories in /tmp/an/exclude.txt")


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "exclude":
        exclude()
    elif command == "split":
        split(int(sys.argv[2]), int(sys.argv[3]))
    else:
        merge(int(sys.argv[2]))
