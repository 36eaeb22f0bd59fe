"""Trace strings shown as they are written.

Streamlit reads the body of st.markdown, st.error, st.warning, st.info and st.caption as Markdown
(plus LaTeX between dollar signs, :color[...] directives, :material/icon: shortcodes and HTML
entities), so `aten::_to_copy > aten::copy_` would come out as `aten::to_copy > aten::copy` in
italics. Every string that comes from a trace or a user (run labels, op chains, kernel names,
engine messages quoting them) goes through md() before it is placed in such a body.
"""

from __future__ import annotations

import re

# CommonMark lets any ASCII punctuation be backslash-escaped; these are the characters that
# Markdown, GFM tables and strikethrough, LaTeX, Streamlit directives or HTML entities read.
SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:&=^\"'])")


def md(text: object) -> str:
    """`text` for a Markdown body, shown literally: special characters backslash-escaped, line
    breaks turned into spaces (one message, one line)."""
    return SPECIAL.sub(r"\\\1", " ".join(str(text).splitlines()))


def code(text: object) -> str:
    """`text` as inline code (literal inside, whatever it holds): fenced by a run of backticks
    longer than any in it, padded with spaces when it starts or ends with a backtick."""
    body = " ".join(str(text).splitlines())
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"
