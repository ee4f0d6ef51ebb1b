"""The query graph, as in the diagram:

item_name_confirm --(answer already set: ask / refuse)--> answer_output -> END
                  \\--> search_embedding  \\
                   --> search_hyde        --> rrf -> rerank -> answer_output -> END
                   --> web_search_mcp ----------------/
"""
from __future__ import annotations

from functools import lru_cache

from langgraph.graph import END, START, StateGraph

from graphs.query.nodes.answer_output import node_answer_output
from graphs.query.nodes.item_name_confirm import node_item_name_confirm
from graphs.query.nodes.rerank import node_rerank
from graphs.query.nodes.rrf import node_rrf
from graphs.query.nodes.search_embedding import node_search_embedding
from graphs.query.nodes.search_hyde import node_search_embedding_hyde
from graphs.query.nodes.web_search import node_web_search_mcp
from graphs.query.state import QueryGraphState

RECALLS = ["node_search_embedding", "node_search_embedding_hyde", "node_web_search_mcp"]


def route_after_confirm(state: dict) -> list[str] | str:
    return "node_answer_output" if state.get("answer") else RECALLS


@lru_cache(maxsize=1)
def build_query_graph():
    g = StateGraph(QueryGraphState)
    for node in (node_item_name_confirm, node_search_embedding, node_search_embedding_hyde,
                 node_web_search_mcp, node_rrf, node_rerank, node_answer_output):
        g.add_node(node.node_name, node)
    g.add_edge(START, "node_item_name_confirm")
    g.add_conditional_edges("node_item_name_confirm", route_after_confirm, ["node_answer_output", *RECALLS])
    # List edges wait for every branch (a join), not for the first one to finish.
    g.add_edge(["node_search_embedding", "node_search_embedding_hyde"], "node_rrf")
    g.add_edge(["node_rrf", "node_web_search_mcp"], "node_rerank")
    g.add_edge("node_rerank", "node_answer_output")
    g.add_edge("node_answer_output", END)
    return g.compile()
