"""attnscope collectors: run attention variants under torch.profiler and write traces that
describe themselves (top-level "attnscope" metadata) plus a runs.json manifest per collection.

    python -m collectors --help

Modules: variants (the attention functions), parity (against an fp32 reference), profile (one
variant -> .json.gz + key_averages table), hub (the optional kernels-hub FlashAttention),
collection (the loop), manifest (runs.json schema), report (the end-of-run table). The article's
modes (sweep, dispatch, e2e, serve) share measure (times, memory, backends, outcomes), mode (their
command line, files and exit status) and tables (each CSV's column contract, which the dashboard reads).
"""
