"""Load and isolation bench of the HTTP API on loopback.

A real server process (`uvicorn api:create_app`) on a fresh data dir; the sample manuals are
uploaded through the API, then N concurrent sessions ask M questions each (half of them streaming
over SSE, half not) while two more manuals are uploaded and imported. Checks: every answer
arrives, no session sees another's content (tags in the questions; the model echoes them; the
history of each session holds only its own), the imports complete. Figures: p50/p95 of the
retrieval path and of time-to-first-delta, total latency, server memory before/peak/after.

    python -m bench.load [--sessions 20] [--questions 5] [--model fake|offline] [--timeout 600] [--out DIR]

`--model fake` (default) answers with a scripted OpenAI-compatible server on 127.0.0.1 that streams
the answer in small deltas and repeats the question; `offline` uses the extractive answer. Nothing
leaves the machine either way.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import psutil
from httpx_sse import EventSource

from bench.cluster import free_port
from bench.common import QA_FILE, BenchError, corpus_docs, md_table, percentiles, write_json

ROOT = Path(__file__).resolve().parent.parent
LATE_DOCS = ("BTT SKR MINI E3 V2.0使用手册", "mf0_get_started")  # imported while the sessions ask
TAG = "【会话{session:02d}问{question}】"
TAG_RE = re.compile(r"【会话(\d+)问(\d+)】")
QUESTION_MARK = "【用户问题】"
ANSWER_FILLER = "根据说明书的相关章节[1]，请按步骤操作，注意接线与供电要求，必要时参考图示。"


@dataclass
class Sample:
    session: int
    question: int
    mode: str                    # "stream" | "plain"
    ok: bool = False
    branch: str = ""             # confirmed | ask | refuse
    error: str = ""
    retrieval_s: float | None = None  # POST -> the rerank node finished (streaming only)
    ttfd_s: float | None = None       # POST -> first delta (streaming only)
    total_s: float | None = None
    deltas: int = 0


@dataclass
class SessionResult:
    session: int
    session_id: str
    samples: list[Sample] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def process_rss_mb(proc: psutil.Process) -> float:
    """The server and any helper process it started (Milvus Lite)."""
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return round(total / 2**20, 1)


class RssSampler(threading.Thread):
    def __init__(self, proc: psutil.Process, interval: float = 0.2):
        super().__init__(daemon=True, name="rss-sampler")
        self.proc, self.interval, self.peak = proc, interval, 0.0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.peak = max(self.peak, process_rss_mb(self.proc))
            self._halt.wait(self.interval)

    def stop(self) -> float:
        self._halt.set()
        self.join()
        return self.peak


SERVER_USER = "bench"  # the one API user of a Server (its key is the caller's)


class Server:
    """`uvicorn api:create_app --factory` as a child process with its own embedded stores."""

    def __init__(self, data_dir: Path, api_key: str, model_base: str | None):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "DATA_DIR": str(data_dir), "API_KEYS": f"{SERVER_USER}:{api_key}", "MILVUS_URL": "", "MONGO_URL": "",
                    "MINIO_ENDPOINT": "", "MCP_DASHSCOPE_BASE_URL": "", "MINERU_API_TOKEN": "",
                    "OPENAI_API_KEY": "bench-key" if model_base else "", "OPENAI_API_BASE": model_base or "",
                    # the scripted vision model needs no rate limit; a real one's would dominate import time
                    "VL_MAX_REQUESTS": "1000"}
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "Server":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "api:create_app", "--factory", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", "warning"], cwd=ROOT, env=self.env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"API 服务进程启动失败（退出码 {self.proc.returncode}）")
            try:
                if httpx.get(f"{self.base_url}/api/health", timeout=30).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise BenchError("API 服务进程 120 秒内没有就绪")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_fake_model():
    """The scripted OpenAI-compatible server of the tests: echoes the question inside the answer."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fakes.openai_server import ScriptedOpenAI

    def answer(body: dict) -> str:
        user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        question = user.split(QUESTION_MARK, 1)[1].strip()
        return f"关于“{question}”：{ANSWER_FILLER}"

    llm = ScriptedOpenAI(chunk_chars=4)
    llm.start()
    llm.add_rule("只输出 JSON", '{"products": [], "rewritten_query": ""}')
    llm.add_rule("产品资料整理专家", "")  # imports: no name from the model, the offline rules decide
    llm.add_rule("用于 Markdown 图片标题", "说明书插图")
    llm.add_rule("不超过300字", "说明书中关于该问题的段落：接口、引脚、供电与操作步骤。")
    llm.add_rule("掌柜智库", answer)
    return llm


def load_questions(imported_stems: set[str]) -> list[str]:
    """Questions of the QA set that name an already imported manual and expect an answer."""
    rows = [json.loads(line) for line in QA_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
    questions = [r["question"] for r in rows if r.get("expect") == "confirm" and set(r["docs"]) <= imported_stems]
    if not questions:
        raise BenchError("问答集中没有可用于压测的问题")
    return questions


def upload(client: httpx.Client, paths: list[Path]) -> list[str]:
    files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in paths]
    reply = client.post("/api/upload", files=files, timeout=120)
    if reply.status_code != 200:
        raise BenchError(f"上传失败：HTTP {reply.status_code} {reply.text[:200]}")
    return reply.json()["task_ids"]


def wait_tasks(client: httpx.Client, task_ids: list[str], deadline: float) -> list[dict]:
    pending, done = list(task_ids), {}
    while pending and time.monotonic() < deadline:
        for task_id in list(pending):
            status = client.get(f"/api/status/{task_id}").json()
            if status["status"] in ("completed", "failed"):
                done[task_id] = {**status, "finished_at": time.perf_counter()}
                pending.remove(task_id)
        time.sleep(0.25)
    return [done.get(t, {"task_id": t, "status": "timeout"}) for t in task_ids]


def sse_messages(response: httpx.Response):
    """(id, name, data) of each event of /api/stream, read with httpx-sse (an event's id is the last
    one the stream gave, as a browser would send it back on reconnect). A 204 is the API saying that
    nothing came after Last-Event-ID: no events."""
    if response.status_code == 204:
        return
    for event in EventSource(response).iter_sse():
        yield (int(event.id) if event.id else None), event.event, event.json()


def ask_streaming(client: httpx.Client, session_id: str, text: str, sample: Sample, timeout: float) -> dict:
    started = time.perf_counter()
    reply = client.post("/api/query", json={"query": text, "session_id": session_id, "is_stream": True})
    if reply.status_code != 200:
        raise BenchError(f"HTTP {reply.status_code} {reply.text[:200]}")
    deltas: list[str] = []
    with client.stream("GET", f"/api/stream/{session_id}", timeout=timeout) as response:
        for _, name, data in sse_messages(response):
            now = time.perf_counter() - started
            if name == "progress" and data.get("node") == "node_rerank" and "status" in data:
                sample.retrieval_s = now
            elif name == "delta":
                sample.ttfd_s = sample.ttfd_s or now
                deltas.append(data["delta"])
            elif name == "error":
                raise BenchError(f"error 事件：{data.get('error')}")
            elif name == "final":
                sample.total_s, sample.deltas = now, len(deltas)
                if data["session_id"] != session_id:
                    raise BenchError(f"final 属于别的会话：{data['session_id']}")
                if "".join(deltas) != data["answer"]:
                    raise BenchError("增量拼接结果与 final 答案不一致")
                return data
    raise BenchError("SSE 流在 final 之前结束")


def ask_plain(client: httpx.Client, session_id: str, text: str, sample: Sample) -> dict:
    started = time.perf_counter()
    reply = client.post("/api/query", json={"query": text, "session_id": session_id})
    sample.total_s = time.perf_counter() - started
    if reply.status_code != 200:
        raise BenchError(f"HTTP {reply.status_code} {reply.text[:200]}")
    body = reply.json()
    if body["session_id"] != session_id:
        raise BenchError(f"答案属于别的会话：{body['session_id']}")
    return body


def foreign_tags(text: str, session: int) -> list[str]:
    return [m.group(0) for m in TAG_RE.finditer(text) if int(m.group(1)) != session]


def run_session(base_url: str, headers: dict, session: int, questions: list[str], streaming: bool,
                echo: bool, deadline: float) -> SessionResult:
    result = SessionResult(session, f"load-{session:02d}-{secrets.token_hex(4)}")
    with httpx.Client(base_url=base_url, headers=headers, timeout=max(5.0, deadline - time.monotonic())) as client:
        for q, question in enumerate(questions):
            tag = TAG.format(session=session, question=q)
            sample = Sample(session, q, "stream" if streaming else "plain")
            result.samples.append(sample)
            if time.monotonic() > deadline:
                sample.error = "超过总时限，未发出"
                continue
            try:
                text = f"{question}{tag}"
                final = (ask_streaming(client, result.session_id, text, sample, deadline - time.monotonic())
                         if streaming else ask_plain(client, result.session_id, text, sample))
                answer, sample.branch = final["answer"], final["branch"]
                if not answer.strip():
                    raise BenchError("答案为空")
                # a clarification or refusal is written by the graph, not the model: no echo there
                if echo and sample.branch == "confirmed" and tag not in answer:
                    raise BenchError("答案里没有本会话本题的标记")
                if foreign_tags(answer, session):
                    raise BenchError(f"答案含其他会话的内容：{foreign_tags(answer, session)}")
                sample.ok = True
            except (BenchError, httpx.HTTPError, KeyError, json.JSONDecodeError) as exc:
                sample.error = f"{type(exc).__name__}: {exc}"
        history = client.get(f"/api/history/{result.session_id}", params={"limit": 500}).json()["messages"]
    users = [m["text"] for m in history if m["role"] == "user"]
    expected = [f"{q}{TAG.format(session=session, question=i)}" for i, q in enumerate(questions)]
    if users != expected:
        result.problems.append(f"历史中的用户消息与本会话提问不一致（{len(users)} 条）")
    if sum(m["role"] == "assistant" for m in history) != len(questions):
        result.problems.append("历史中的回答条数不对")
    leaked = [t for m in history for t in foreign_tags(m["text"], session)]
    if leaked:
        result.problems.append(f"历史中出现其他会话的内容：{leaked[:3]}")
    return result


def run(sessions: int = 20, questions_per_session: int = 5, model: str = "fake", timeout: float = 600.0,
        out: str | Path = ROOT / "bench" / "out" / "load", log=print) -> dict:
    started = time.monotonic()
    deadline = started + timeout
    docs = corpus_docs()
    late = [d for d in docs if d.stem in LATE_DOCS]
    early = [d for d in docs if d.stem not in LATE_DOCS]
    if len(late) != len(LATE_DOCS):
        raise BenchError(f"样例语料里缺少压测期间导入的文档：{LATE_DOCS}")
    questions = load_questions({d.stem for d in early} | {d.parent.name for d in early})
    data_dir = Path(tempfile.mkdtemp(prefix="zgzk-load-"))
    api_key = secrets.token_urlsafe(16)
    headers = {"Authorization": f"Bearer {api_key}"}
    llm = start_fake_model() if model == "fake" else None
    try:
        with Server(data_dir, api_key, llm.base_url if llm else None) as server, \
                httpx.Client(base_url=server.base_url, headers=headers, timeout=120) as client:
            proc = psutil.Process(server.proc.pid)
            log(f"服务进程 {server.base_url}（pid {server.proc.pid}），数据目录 {data_dir}，模型：{model}")
            log(f"预先导入 {len(early)} 份说明书……")
            base = wait_tasks(client, upload(client, early), deadline)
            failed = [s for s in base if s["status"] != "completed"]
            if failed:
                raise BenchError(f"预先导入失败：{[(s.get('file_name'), s.get('error')) for s in failed]}")
            # warm-up: models and stores loaded, so "before" is the steady state, not an empty process
            client.post("/api/query", json={"query": questions[0]})
            rss_before = process_rss_mb(proc)
            sampler = RssSampler(proc)
            sampler.start()

            log(f"{sessions} 个会话 × {questions_per_session} 个问题（一半流式），同时导入 {len(late)} 份说明书……")
            load_started = time.perf_counter()
            late_ids = upload(client, late)
            plan = [[questions[(s * questions_per_session + q) % len(questions)] for q in range(questions_per_session)]
                    for s in range(sessions)]
            with ThreadPoolExecutor(max_workers=sessions + 1) as pool:
                imports = pool.submit(wait_tasks, client, late_ids, deadline)
                futures = [pool.submit(run_session, server.base_url, headers, s, plan[s], s % 2 == 0, llm is not None,
                                       deadline) for s in range(sessions)]
                results = [f.result() for f in futures]
                late_status = imports.result()
            load_seconds = time.perf_counter() - load_started
            rss_peak = sampler.stop()
            time.sleep(2.0)  # finished channels and threads settle
            rss_after = process_rss_mb(proc)
    finally:
        if llm:
            llm.stop()
        shutil.rmtree(data_dir, ignore_errors=True)

    samples = [s for r in results for s in r.samples]
    streamed = [s for s in samples if s.mode == "stream" and s.ok]
    report = {
        "config": {"sessions": sessions, "questions_per_session": questions_per_session, "model": model,
                   "streaming_sessions": sum(1 for s in range(sessions) if s % 2 == 0), "cores": os.cpu_count(),
                   "late_imports": [d.name for d in late], "timeout_s": timeout},
        "answers": {"asked": len(samples), "arrived": sum(s.ok for s in samples),
                    "branches": dict(Counter(s.branch for s in samples if s.ok)),
                    "failed": [asdict(s) for s in samples if not s.ok]},
        "isolation_problems": {r.session_id: r.problems for r in results if r.problems},
        "imports_during_load": [{"file": s.get("file_name"), "status": s["status"], "chunks": s.get("chunks"),
                                 "seconds_after_load_start": round(s["finished_at"] - load_started, 2)
                                 if "finished_at" in s else None} for s in late_status],
        "latency": {
            "retrieval_path_stream": percentiles([s.retrieval_s for s in streamed if s.retrieval_s is not None]),
            "time_to_first_delta_stream": percentiles([s.ttfd_s for s in streamed if s.ttfd_s is not None]),
            "total_stream": percentiles([s.total_s for s in streamed]),
            "total_plain": percentiles([s.total_s for s in samples if s.mode == "plain" and s.ok]),
        },
        "load_seconds": round(load_seconds, 2),
        "throughput_answers_per_s": round(sum(s.ok for s in samples) / load_seconds, 2),
        "server_rss_mb": {"before": rss_before, "peak": rss_peak, "after": rss_after,
                          "after_minus_before": round(rss_after - rss_before, 1)},
        "seconds": round(time.monotonic() - started, 1),
    }
    report["passed"] = (report["answers"]["arrived"] == report["answers"]["asked"]
                        and not report["isolation_problems"]
                        and all(s["status"] == "completed" for s in report["imports_during_load"]))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "load.json", report)
    log(summary(report))
    return report


def summary(report: dict) -> str:
    lat = report["latency"]
    rows = [[name, lat[key]["n"], lat[key]["p50_ms"], lat[key]["p95_ms"]] for name, key in (
        ("检索路径（流式，提交→精排完成）", "retrieval_path_stream"),
        ("首个增量（流式，提交→第一个 delta）", "time_to_first_delta_stream"),
        ("完整回答（流式）", "total_stream"), ("完整回答（非流式）", "total_plain"))]
    rss = report["server_rss_mb"]
    answers = report["answers"]
    lines = [
        "", md_table(["指标", "样本数", "p50 (ms)", "p95 (ms)"], rows), "",
        f"答案：{answers['arrived']}/{answers['asked']} 到达（{answers['branches']}）；"
        f"会话串话问题：{len(report['isolation_problems'])} 个会话",
        "压测期间导入：" + "；".join(f"{i['file']} {i['status']}（{i['chunks']} 个切片，开始后 "
                                   f"{i['seconds_after_load_start']} 秒完成）" for i in report["imports_during_load"]),
        f"压测用时 {report['load_seconds']} 秒，吞吐 {report['throughput_answers_per_s']} 个回答/秒",
        f"服务进程内存（含子进程）：压测前 {rss['before']} MB，峰值 {rss['peak']} MB，压测后 {rss['after']} MB"
        f"（差 {rss['after_minus_before']} MB）",
        "结论：" + ("通过" if report["passed"] else "未通过"),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description="HTTP API 并发压测与会话隔离检查（本机回环）")
    parser.add_argument("--sessions", type=int, default=20, help="并发会话数（默认 20，一半流式）")
    parser.add_argument("--questions", type=int, default=5, help="每个会话的提问数（默认 5）")
    parser.add_argument("--model", choices=["fake", "offline"], default="fake",
                        help="fake：本机脚本化的 OpenAI 兼容服务（流式增量）；offline：摘录式回答")
    parser.add_argument("--timeout", type=float, default=600.0, help="总时限（秒，默认 600）")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "load"), help="报告目录")
    args = parser.parse_args(argv)
    try:
        report = run(args.sessions, args.questions, args.model, args.timeout, args.out)
    except BenchError as exc:
        print(f"压测失败：{exc}", file=sys.stderr)
        return 2
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
