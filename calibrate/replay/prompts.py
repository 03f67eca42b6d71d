"""Prompts of an exact token count, built through the server's own tokenizer.

A prompt is a short tag unique to the run and the request (so no two prompts share a prefix an engine could cache:
llama-cpp-python reuses the previous prompt's KV, llama-server caches per slot, vLLM caches
16-token blocks) followed by a filler word repeated. The filler count is corrected against the
server's tokenizer until the prompt has the requested number of tokens (as the server counts them,
including a BOS it adds). A trace request with a shared prefix (`prefix_id`, `prefix_tokens`) gets
the same leading text as the other requests of that prefix, so prefix caching can work as the trace
intends.

Without a tokenizer endpoint the filler count is an estimate (one token per filler word) and the
result says so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

# " a" is one token in the SentencePiece and BPE vocabularies we know (Llama, Gemma, Qwen, GPT-2);
# the correction loop below copes with any other ratio.
FILLER = " a"
_MAX_ROUNDS = 6

Tokenize = Callable[[str], Awaitable[int]]  # text -> token count as the server would see it


async def exact_prompt(tokenize: Tokenize, head: str, n_tokens: int) -> tuple[str, int]:
    """`head` + filler such that the server counts `n_tokens` tokens; returns (text, real count).

    Solves count(head + FILLER * k) = n_tokens for k by secant steps on the measured counts (the
    count grows by about one token per filler word). If `head` alone is already longer, returns
    `head` and its count.
    """
    base = await tokenize(head)
    if base >= n_tokens:
        return head, base
    k = n_tokens - base
    per_word = 1.0
    best: tuple[int, str, int] | None = None
    for _ in range(_MAX_ROUNDS):
        text = head + FILLER * k
        n = await tokenize(text)
        miss = abs(n - n_tokens)
        if best is None or miss < best[0]:
            best = (miss, text, n)
        if n == n_tokens:
            break
        if k > 0 and n > base:
            per_word = (n - base) / k
        step = round((n_tokens - n) / per_word) or (1 if n < n_tokens else -1)
        k = max(0, k + step)
    return best[1], best[2]


async def build_prompts(requests, tokenize: Tokenize | None, tag: str) -> tuple[dict[str, tuple[str, int]], str]:
    """Text and token count of every request's prompt; plus how the count was obtained.

    `tokenize` None: no tokenizer endpoint — `FILLER` words counted as one token each, labelled
    "estimate". Otherwise every count is the server's ("exact" — or "approximate" if some prompt
    could not be hit exactly, e.g. a length shorter than the request tag).
    """
    prompts: dict[str, tuple[str, int]] = {}
    prefixes: dict[str, tuple[str, int]] = {}
    if tokenize is None:
        for r in requests:
            prompts[r.id] = (FILLER * r.prompt_tokens, r.prompt_tokens)
        return prompts, "estimate"
    all_exact = True
    for r in requests:
        # the run's tag then the request id, first: prompts differ within their first few tokens,
        # from each other and from any earlier run's (an engine may keep its cache between runs)
        head = f"{tag}{r.id}:"
        if r.prefix_id and 0 < r.prefix_tokens < r.prompt_tokens:
            if r.prefix_id not in prefixes:
                prefixes[r.prefix_id] = await exact_prompt(tokenize, f"{tag}p{r.prefix_id}:", r.prefix_tokens)
            head = prefixes[r.prefix_id][0] + head
        text, n = await exact_prompt(tokenize, head, r.prompt_tokens)
        all_exact &= n == r.prompt_tokens
        prompts[r.id] = (text, n)
    return prompts, "exact" if all_exact else "approximate"
