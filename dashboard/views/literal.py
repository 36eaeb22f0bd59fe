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


# A widget's label (checkbox, expander, button...) reads a small part of Markdown: emphasis, code,
# strikethrough, links, math, :icon: and :color[...] directives, entities. md() would escape every
# punctuation mark, and the escapes would be the label's accessible name ("Pin naive \\[h200\\]").
_LABEL_ESCAPES = (
    (re.compile(r"([\\`*~$])"), r"\\\1"),  # escapes, code, emphasis, strikethrough, math
    (re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])"), r"\\_"),  # emphasis; an _ inside a word (naive_inplace) is none
    (
        re.compile(r":([A-Za-z]+)/(?=[\w-]+:)"),
        r":\1\\/",
    ),  # an icon, :material/home: (its first colon's escape is not heeded)
    (re.compile(r"(:[\w+-]+):"), r"\1\\:"),  # an emoji, :smile:
    (re.compile(r":(?=[A-Za-z-]+\[)"), r"\\:"),  # a directive, :red[...]
    (re.compile(r"\[(?=[^\]]*\]\()"), r"\\["),  # a link [text](url)
    (re.compile(r"&(?=#?\w+;)"), r"\\&"),  # an entity
)


def label(text: object) -> str:
    """`text` for a widget's label, shown literally and read aloud as written: only what the
    label's Markdown would read is escaped, so 'naive [h200]' stays 'naive [h200]' (md() would
    give 'naive \\[h200\\]', which a screen reader and AppTest read with its backslashes)."""
    out = " ".join(str(text).splitlines())
    for pattern, escaped in _LABEL_ESCAPES:
        out = pattern.sub(escaped, out)
    return out


def code(text: object) -> str:
    """`text` as inline code (literal inside, whatever it holds): fenced by a run of backticks
    longer than any in it, padded with spaces when it starts or ends with a backtick."""
    body = " ".join(str(text).splitlines())
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"
