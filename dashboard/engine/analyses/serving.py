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


# SGLang's step annotation, as the bundled MI300X trace carries it beside the execute_ one above:
# step[EXTEND bs=15 toks=15360]: the batch's forward mode, its requests and its new tokens (no keys).
SGLANG_STEP_ANNOTATION = re.compile(r"step\[([A-Z_0-9]+) bs=(\d+) toks=(\d+)\]")
# SGLang's forward modes that are a phase (ForwardMode in sglang/srt/model_executor/forward_batch_info.py);
# the others (IDLE, TARGET_VERIFY, DRAFT_EXTEND, ...) are not read as a phase.
SGLANG_PHASES = {"EXTEND": "prefill", "SPLIT_PREFILL": "prefill", "DECODE": "decode", "MIXED": "mixed"}
PHASE_ANNOTATIONS = (STEP_ANNOTATION, OLDER_STEP_ANNOTATION, SGLANG_STEP_ANNOTATION)


@dataclass(frozen=True)
class StepPhases:
    """One step annotation read with its two phases apart (ServingBatch sums them). form: 'vllm'
    (STEP_ANNOTATION, which vLLM and SGLang write), 'vllm-older' (OLDER_STEP_ANNOTATION) or 'sglang'
    (SGLANG_STEP_ANNOTATION). prefill_* are the context (extend) requests and their new tokens,
    decode_* the generation requests, their new tokens and the keys they read (decode_keys: the sum of
    each decode request's context, None where the form does not give it: keys_reason says why).
    phase: 'prefill', 'decode' or 'mixed'; None for an empty step. For SGLang's form only the batch's
    total requests and tokens are known (a MIXED batch does not split them): the per-phase fields of
    the phase it does not name are 0 and of a mixed batch None."""

    form: str
    text: str
    phase: str | None
    requests: int
    tokens: int
    prefill_tokens: int | None
    decode_tokens: int | None
    decode_keys: int | None
    keys_reason: str | None = None

    @property
    def rank(self) -> int:
        """How much the form tells: the current form (keys) over the older one over SGLang's."""
        return {"vllm": 2, "vllm-older": 1}.get(self.form, 0)


def _phase_of(prefill_requests: int, decode_requests: int) -> str | None:
    if prefill_requests and decode_requests:
        return "mixed"
    return "prefill" if prefill_requests else "decode" if decode_requests else None


def read_phases(name: str | None) -> StepPhases | None:
    """The step annotation in `name` read by phase (StepPhases), or None when it holds none."""
    text = name or ""
    match = STEP_ANNOTATION.search(text)
    if match is not None:
        n = [int(x) for x in match.groups()]
        return StepPhases("vllm", match.group(0), _phase_of(n[0], n[5]), n[0] + n[5], n[1] + n[6], n[1], n[6], n[7])
    match = OLDER_STEP_ANNOTATION.search(text)
    if match is not None:
        requests, tokens, _, gen_requests, gen_tokens = (int(x) for x in match.groups()[:5])
        reason = (
            f"vLLM's older step annotation {match.group(0)} gives no key count for its generation requests"
            if gen_requests
            else None
        )
        keys = None if gen_requests else 0
        phase = _phase_of(requests, gen_requests)
        return StepPhases(
            "vllm-older",
            match.group(0),
            phase,
            requests + gen_requests,
            tokens + gen_tokens,
            tokens,
            gen_tokens,
            keys,
            reason,
        )
    match = SGLANG_STEP_ANNOTATION.search(text)
    if match is None:
        return None
    mode, requests, tokens = match.group(1), int(match.group(2)), int(match.group(3))
    phase = SGLANG_PHASES.get(mode)
    if phase is None:
        return None
    split = {"prefill": (tokens, 0), "decode": (0, tokens)}.get(phase, (None, None))
    reason = f"SGLang's step annotation {match.group(0)} gives no key count" if phase != "prefill" else None
    keys = 0 if phase == "prefill" else None
    return StepPhases("sglang", match.group(0), phase, requests, tokens, split[0], split[1], keys, reason)
