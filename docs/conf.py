"""Sphinx configuration of vdbflow's documentation site: the user guide (the Markdown pages of docs/, read by
MyST) and the API reference (docs/api.md, from the docstrings).  Built with warnings as errors:

    python -m sphinx -W -b html docs docs/_build/html
"""

project = "vdbflow"
author = "the vdbflow developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "figures/*.json"]
myst_heading_anchors = 3
napoleon_google_docstring = False
napoleon_numpy_docstring = True
autodoc_member_order = "bysource"
autodoc_typehints = "description"
html_theme = "alabaster"
