"""The page marker a converted PDF carries before each page's text, in a module of its own: the
splitter reads it without loading the PDF library (which costs most of a second at every start)."""
from __future__ import annotations

import re

PAGE_MARKER = "<!-- kb-page: {} -->"  # 1-based page number; an HTML comment, so Markdown readers hide it
PAGE_MARKER_RE = re.compile(r"<!-- kb-page: (\d+) -->")
