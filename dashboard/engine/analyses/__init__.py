"""The analyses floor: questions asked of one trace (steps' work, kernels, copies, backends,
memory, health, CUDA graphs, attention efficiency and the roofline, the summary, the article's
tables). Imports only the model, rules and load floors.
"""
