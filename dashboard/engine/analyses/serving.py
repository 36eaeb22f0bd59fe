"""Serving frameworks' step annotations (vLLM, SGLang): how many requests a step holds, and the query
tokens, keys and causal score pairs over them, which a serving attention op's own inputs do not give."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dashboard.engine.analyses.formulas import MAX_DIM


# vLLM's and SGLang's profiler step annotation, e.g. execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086):
# per phase (context = prefill, generation = decode), the number of requests and, over them, the sums
# of new query tokens nq (sq), of keys nkv (sk), of nq^2 (sqsq) and of nq*nkv (sqsk).
STEP_ANNOTATION = re.compile(
    r"_context_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)_generation_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)"
)
# vLLM's older form of it, e.g. execute_context_1(888_788544)_generation_0(0): per phase the number of
# requests, then the sum of new query tokens nq and, after an underscore, the sum of nq^2 (the
# generation phase may give the tokens alone). It gives no key count: a context request is one that has
# produced no token yet, taken here as a fresh prefill whose keys are its own query tokens (nkv = nq); a
# generation request's keys are its whole context, which it does not give.
OLDER_STEP_ANNOTATION = re.compile(r"_context_(\d+)\((\d+)_(\d+)\)_generation_(\d+)\((\d+)(?:_(\d+))?\)")
STEP_ANNOTATIONS = (STEP_ANNOTATION, OLDER_STEP_ANNOTATION)


@dataclass(frozen=True)
class ServingBatch:
    """One serving step's requests, from its step annotation (STEP_ANNOTATIONS), both phases summed:
    requests, sq (query tokens), sk (keys over the requests), sqsq (sum of nq^2), sqsk (sum of nq*nkv);
    older: read from vLLM's older annotation (keys = query tokens, see OLDER_STEP_ANNOTATION)."""

    requests: int
    sq: int
    sk: int
    sqsq: int
    sqsk: int
    older: bool = False

    @property
    def pairs(self) -> int:
        """Score pairs of causal decoder attention: a request's i-th new token (0-based) sees
        nkv - nq + i + 1 keys, nq*nkv - nq*(nq-1)/2 pairs per request, so sqsk - (sqsq - sq)/2."""
        return self.sqsk - (self.sqsq - self.sq) // 2

    @classmethod
    def parse(cls, name: str | None) -> "ServingBatch | None":
        """The batch of a step annotation in either form, or None (no annotation, or one that does not
        give the lengths: read() says why)."""
        found = cls.read(name)
        return found if isinstance(found, ServingBatch) else None

    @classmethod
    def read(cls, name: str | None) -> "ServingBatch | str | None":
        """The batch of a step annotation (STEP_ANNOTATIONS); a reason when the annotation is there
        but does not give every request's lengths; None when the name holds no annotation."""
        match = STEP_ANNOTATION.search(name or "")
        if match is not None:
            n = [int(x) for x in match.groups()]
            found = cls(n[0] + n[5], n[1] + n[6], n[2] + n[7], n[3] + n[8], n[4] + n[9])
            ok = 0 <= found.pairs and found.sq <= found.sk and max(n) < MAX_DIM
            return found if ok else f"step annotation {match.group(0)} does not add up to lengths"
        match = OLDER_STEP_ANNOTATION.search(name or "")
        if match is None:
            return None
        text = match.group(0)
        requests, tokens, squares, gen_requests, gen_tokens = (int(x) for x in match.groups()[:5])
        if gen_requests or gen_tokens:
            return (
                f"vLLM's older step annotation {text} gives no key count for its {gen_requests} generation "
                "requests, whose keys are their whole context"
            )
        # nq >= 1 for each request: tokens <= squares <= tokens^2, and no more requests than tokens
        if max(requests, tokens, squares) >= MAX_DIM or not (requests <= tokens <= squares <= tokens * tokens):
            return f"step annotation {text} does not add up to lengths"
        return cls(requests, tokens, tokens, squares, squares, older=True)
