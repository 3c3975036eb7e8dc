"""Evaluations: episodes played by an agent (a reference policy, a model, someone's harness) and what they scored.

Pure Python, no Django: the players (`baseline`, `model`), the readers of submitted and imported results
(`ingest`) and the episode record they all produce (`episodes`). The hub's services store them
(registry.services.evaluation), with statistics from registry.evalstats computed from the episodes.
"""
