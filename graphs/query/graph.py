"""The query graph, as in the diagram:

load_history -> product_confirm --(answer already set: ask / refuse)--> answer_output
                                  \\--> plan --(simple)--> search_embedding  \\
                                                   --> search_hyde        --> rrf -> rerank -> grade
                                                   --> web_search_mcp ----------------/
                                          \\--(complex: Send per sub-question, and the whole question when the
                                               split keeps its products)--> sub_question -> synthesis -> answer_output
grade --(answer / clarify / no_knowledge)--> answer_output
      \\--(rewrite, once)--> rewrite_query -> search_rewritten -> grade
answer_output -> save_history -> END

Settings and services reach the nodes through `config["configurable"]` (see configuration.py).
"""
from __future__ import annotations

from functools import lru_cache

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from graphs.query.nodes.answer_output import node_answer_output
from graphs.query.nodes.grade import node_grade
from graphs.query.nodes.history import node_load_history, node_save_history
from graphs.query.nodes.product_confirm import node_product_confirm
from graphs.query.nodes.plan import node_plan
from graphs.query.nodes.rerank import node_rerank
from graphs.query.nodes.rewrite import node_rewrite_query
from graphs.query.nodes.rrf import node_rrf
from graphs.query.nodes.search_embedding import node_search_embedding
from graphs.query.nodes.search_hyde import node_search_embedding_hyde
from graphs.query.nodes.search_rewritten import node_search_rewritten
from graphs.query.nodes.sub_question import node_sub_question
from graphs.query.nodes.synthesis import node_synthesis
from graphs.query.nodes.web_search import node_web_search_mcp
from graphs.query.planning import evidence_branches
from graphs.query.state import QueryGraphState

RECALLS = ["node_search_embedding", "node_search_embedding_hyde", "node_web_search_mcp"]


def route_after_confirm(state: QueryGraphState) -> str:
    return "node_answer_output" if state.get("answer") else "node_plan"


def route_after_plan(state: QueryGraphState) -> list[str] | list[Send]:
    subs = state.get("sub_questions") or []
    if not subs:
        return RECALLS
    return [Send("node_sub_question", {"sub_question": branch})
            for branch in evidence_branches(state["rewritten_query"], state.get("products") or [], subs)]


def route_after_grade(state: QueryGraphState) -> str:
    return "node_rewrite_query" if (state.get("grade") or {}).get("route") == "rewrite" else "node_answer_output"


@lru_cache(maxsize=1)
def build_query_graph():
    g = StateGraph(QueryGraphState)
    for node in (node_load_history, node_save_history, node_product_confirm, node_search_embedding, node_search_embedding_hyde,
                 node_web_search_mcp, node_rrf, node_rerank, node_answer_output, node_plan, node_sub_question,
                 node_synthesis, node_grade, node_rewrite_query, node_search_rewritten):
        g.add_node(node.node_name, node)
    g.add_edge(START, "node_load_history")
    g.add_edge("node_load_history", "node_product_confirm")
    g.add_conditional_edges("node_product_confirm", route_after_confirm, ["node_answer_output", "node_plan"])
    g.add_conditional_edges("node_plan", route_after_plan, [*RECALLS, "node_sub_question"])
    g.add_edge("node_sub_question", "node_synthesis")
    g.add_edge("node_synthesis", "node_answer_output")
    # List edges wait for every branch (a join), not for the first one to finish.
    g.add_edge(["node_search_embedding", "node_search_embedding_hyde"], "node_rrf")
    g.add_edge(["node_rrf", "node_web_search_mcp"], "node_rerank")
    g.add_edge("node_rerank", "node_grade")
    g.add_conditional_edges("node_grade", route_after_grade, ["node_rewrite_query", "node_answer_output"])
    g.add_edge("node_rewrite_query", "node_search_rewritten")
    g.add_edge("node_search_rewritten", "node_grade")
    g.add_edge("node_answer_output", "node_save_history")
    g.add_edge("node_save_history", END)
    return g.compile()
