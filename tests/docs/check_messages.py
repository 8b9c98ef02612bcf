"""Checks that every error message docs/troubleshooting.md explains is still one rgpu prints (ctest
docs_messages).

The page gives each message as a level-3 heading holding a code span, with `…` where the message
has a variable part (an address, a number, a name):

    ### `cannot reach … at … after … attempts in … s: …`

Each piece between the `…` must appear word for word in a string literal of the sources that
print messages to users (client/, server/, opserver/, protocol/, common/, python/rgpu/, tools/),
after adjacent literals are joined as the compiler joins them ("a " "b" across lines is "a b").
A message reworded in the code, or one that no longer exists, fails here with the heading, so the
page cannot keep explaining messages nobody sees. A piece of fewer than 3 characters is not
checked on its own; each message must have a piece of at least 12.

    python3 tests/docs/check_messages.py [REPO]
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

SOURCE_DIRS = ("client", "server", "opserver", "protocol", "common", "python/rgpu", "tools")
SUFFIXES = {".cpp", ".h", ".c", ".py"}
HEADING = re.compile(r"^### `(.+)`\s*$", re.M)
# The end of one string literal and the start of the next, with only space between them: C and
# C++ adjacent literals, Python's implicit concatenation (the next may be an f-string).
JOIN = re.compile(r"([\"'])\s*\n\s*(?:f|rf|fr|r)?\1|\"[ \t]+\"")
MIN_PIECE, MIN_LONGEST = 3, 12


def source_text(repo: Path) -> str:
    parts = []
    for d in SOURCE_DIRS:
        for f in sorted((repo / d).rglob("*")):
            if f.suffix in SUFFIXES and not f.name.endswith("_test.cpp") and "/gen/" not in str(f):
                parts.append(JOIN.sub("", f.read_text(encoding="utf-8", errors="replace")))
    return "\n".join(parts).replace('\\"', '"').replace("\\'", "'")


def main() -> int:
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    page = (repo / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    messages = HEADING.findall(page)
    if len(messages) < 10:
        print(f"check_messages: docs/troubleshooting.md has {len(messages)} message headings "
              "(### `message`); expected the page's list of messages", file=sys.stderr)
        return 1
    text = source_text(repo)
    failures = []
    for m in messages:
        pieces = [p.strip() for p in m.split("…")]
        pieces = [p for p in pieces if len(p) >= MIN_PIECE]
        if not pieces or max(len(p) for p in pieces) < MIN_LONGEST:
            failures.append(f"`{m}`: too little fixed text to find (give a piece of at least {MIN_LONGEST} characters)")
            continue
        missing = [p for p in pieces if p not in text]
        if missing:
            failures.append(f"`{m}`: not in the sources: " + "; ".join(repr(p) for p in missing))
    for f in failures:
        print("check_messages: docs/troubleshooting.md explains a message rgpu no longer prints as written: "
              f"{f}. Update the heading to the message the code prints now (or drop its entry).", file=sys.stderr)
    print(f"check_messages: {len(messages) - len(failures)} of {len(messages)} messages found in the sources")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
