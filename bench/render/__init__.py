"""The renderers of docs/*.md and README.md's generated blocks, one module per page (bench/render_docs.py is
the command that runs them); common.py holds what the pages share."""
