"""The import graph, as in the diagram:

entry -> (pdf_to_md | doc_to_md) -> md_img -> document_split -> product_recognition -> bge_embedding
      -> import_milvus -> END
"""
from __future__ import annotations

from functools import lru_cache

from langgraph.graph import END, START, StateGraph

from graphs.importing.nodes.doc_to_md import node_doc_to_md
from graphs.importing.nodes.document_split import node_document_split
from graphs.importing.nodes.embedding import node_bge_embedding
from graphs.importing.nodes.entry import FIRST_STEP, node_entry, route_after_entry
from graphs.importing.nodes.import_milvus import node_import_milvus
from graphs.importing.nodes.product import node_product_recognition
from graphs.importing.nodes.md_img import node_md_img
from graphs.importing.nodes.pdf_to_md import node_pdf_to_md
from graphs.importing.state import ImportGraphState

NODE_LABELS = {
    "node_entry": "检查文件", "node_pdf_to_md": "PDF 转 Markdown",
    "node_doc_to_md": "文档转 Markdown", "node_md_img": "图片处理",
    "node_document_split": "文档切分", "node_product_recognition": "商品名识别",
    "node_bge_embedding": "向量化", "node_import_milvus": "写入向量库",
}


@lru_cache(maxsize=1)
def build_import_graph():
    g = StateGraph(ImportGraphState)
    for node in (node_entry, node_pdf_to_md, node_doc_to_md, node_md_img, node_document_split,
                 node_product_recognition, node_bge_embedding, node_import_milvus):
        g.add_node(node.node_name, node)
    g.add_edge(START, "node_entry")
    g.add_conditional_edges("node_entry", route_after_entry, sorted(set(FIRST_STEP.values())))
    g.add_edge("node_pdf_to_md", "node_md_img")
    g.add_edge("node_doc_to_md", "node_md_img")
    g.add_edge("node_md_img", "node_document_split")
    g.add_edge("node_document_split", "node_product_recognition")
    g.add_edge("node_product_recognition", "node_bge_embedding")
    g.add_edge("node_bge_embedding", "node_import_milvus")
    g.add_edge("node_import_milvus", END)
    return g.compile()
