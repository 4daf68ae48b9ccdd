"""Long-context key retrieval prompt: filler text with one key sentence hidden at a random depth.

Size: ``context_tokens`` is a target in tokens, estimated as characters / 4 (a common English BPE
ratio; DeepSeek-V4's and the tiny test model's tokenizers differ, so the gate reports the server's
real ``prompt_tokens``). The filler is drawn from a seeded RNG each run, so a repeated run is not served
from the prefix cache unless the same seed is given (the recipe's retrieval proof had 0 cached tokens).
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

__all__ = ["CHARS_PER_TOKEN", "Haystack", "build_haystack"]

CHARS_PER_TOKEN = 4
_SUBJECTS = ("The archive", "A courier", "The ledger", "An old map", "The harbour office", "A night clerk")
_VERBS = ("recorded", "misplaced", "copied", "described", "returned", "stamped")
_OBJECTS = ("a crate of lamp oil", "three brass keys", "the tide tables", "a torn manifest", "grain receipts")
_PLACES = ("near the north gate", "before the storm", "at the customs house", "on the second floor")


@dataclass(frozen=True, slots=True)
class Haystack:
    """The prompt, the key it hides, and the key sentence's relative depth (0 = start, 1 = end)."""

    prompt: str
    key: str
    depth: float
    estimated_tokens: int


def build_haystack(context_tokens: int, seed: int | None = None) -> Haystack:
    """A prompt of about ``context_tokens`` tokens asking for the one key hidden in it."""
    rng = random.Random(seed)
    alphabet = string.ascii_uppercase + string.digits
    key = "-".join("".join(rng.choice(alphabet) for _ in range(4)) for _ in range(3))
    question = (
        "\n\nSomewhere in the text above is a sentence giving the secret key. "
        "What is the secret key? Reply with the key only."
    )
    needle = f" The secret key is {key}. "
    budget = max(0, context_tokens * CHARS_PER_TOKEN - len(question) - len(needle))
    sentences: list[str] = []
    used = 0
    while used < budget:
        words = (rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS), rng.choice(_PLACES))
        s = " ".join(words) + f" (entry {rng.randrange(10**5)})."
        sentences.append(s)
        used += len(s) + 1
    at = rng.randint(0, len(sentences))
    sentences.insert(at, needle.strip())
    text = " ".join(sentences) + question
    return Haystack(text, key, at / max(1, len(sentences) - 1), len(text) // CHARS_PER_TOKEN)
