"""Query graph: a question becomes a cited answer (or a clarifying question, or a refusal).

The public front door: the chat, the HTTP API, the CLI and the benchmarks ask through these names and
never reach into node modules. `astream_query` yields node, delta and final events; `run_query` is
the same run collected; `answer_of` turns the final event into the answer every surface shows;
`rank_products` is the product matcher (the chat uses it to order candidate buttons); `cited` says
which sources an answer's text cites (the chat shows only those).
"""
from graphs.query.contracts import Answer, FinalEvent, Hit, Source, answer_of
from graphs.query.extractive import cited
from graphs.query.product_match import rank_products
from graphs.query.runner import astream_query, run_query

__all__ = [
    "Answer", "FinalEvent", "Hit", "Source", "answer_of", "astream_query", "cited", "rank_products", "run_query",
]
