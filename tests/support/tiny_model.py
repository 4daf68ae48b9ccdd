"""Build the tiny "scripted" Llama model that the end-to-end tests serve with a real vLLM.

Run with the vLLM venv's python (it needs torch, transformers and tokenizers)::

    .venv-vllm/bin/python tests/support/tiny_model.py OUT_DIR

Everything is built offline and deterministically, in a few seconds:

* Tokenizer: byte-level BPE (vocab about 4,000) trained with ``tokenizers`` on a fixed, sorted
  subset of the standard library's ``.py`` files. ``<|endoftext|>`` (pad), ``<|im_start|>`` and
  ``<|im_end|>`` (EOS) are special tokens; ``<think>`` and ``</think>`` are single (non-special)
  added tokens, as vLLM's reasoning parsers require.
* Chat template: ChatML; the generation prompt is ``<|im_start|>assistant\\n<think>\\n``.
* Model: ``LlamaConfig`` hidden 64, 2 layers, 2 heads, head_dim 32, float32, lm_head untied.
  Attention and MLP output projections are zero, so the logits depend only on the last token.
  The embedding puts each token in a class (one per chain token, one for all others) and lm_head
  maps each class to one next token.

What the model outputs: under greedy decoding, whatever the prompt, the completion is always
``CHAIN`` = ``Let me think</think>Hello world<|im_end|>`` (EOS = ``<|im_end|>``). Every token
that is not in the chain is followed by the first chain token, and each chain token by its
successor. Through vLLM with ``--reasoning-parser deepseek_r1`` that is reasoning
``"Let me think"``, content ``"Hello world"``; ``CHAIN_TOKENS`` (written to ``chain.json``) says how
many completion tokens that is. If the prompt already contains the chain's text, ngram speculative
decoding drafts it and every draft is accepted.

``OUT_DIR/.stamp`` holds the SHA-256 of this file; it is written last, so a directory whose stamp
matches is a complete build of the current source.
"""

from __future__ import annotations

import hashlib
import json
import sys
import sysconfig
from pathlib import Path

CHAIN = "Let me think</think>Hello world<|im_end|>"
VOCAB_SIZE = 4000
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK_TOKENS = ["<think>", "</think>"]
EOS = "<|im_end|>"
PAD = "<|endoftext|>"
CORPUS_FILES = 60  # the first N stdlib modules by name
LOGIT_SCALE = 10.0
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['content'] is string %}{% set content = message['content'] %}"
    "{% else %}{% set content = message['content'] | map(attribute='text') | join('') %}{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ content }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


def source_hash() -> str:
    """SHA-256 of this builder's source: the stamp that says a build is current."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def corpus_files() -> list[Path]:
    """A fixed, sorted subset of the stdlib's top-level .py files."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.is_file())
    return files[:CORPUS_FILES]


def build_tokenizer():
    """Train the byte-level BPE and wrap it as a transformers fast tokenizer."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in corpus_files()]
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def chain_ids(tokenizer) -> list[int]:
    """Token ids of CHAIN; they must be distinct for the next-token map to be well defined."""
    ids = tokenizer.encode(CHAIN, add_special_tokens=False)
    if len(set(ids)) != len(ids) or ids[-1] != tokenizer.convert_tokens_to_ids(EOS):
        raise SystemExit(f"chain tokens not usable: {tokenizer.convert_ids_to_tokens(ids)}")
    for t in THINK_TOKENS:
        if len(tokenizer.encode(t, add_special_tokens=False)) != 1:
            raise SystemExit(f"{t} is not a single token")
    return ids


def build_model(vocab_size: int, chain: list[int], eos_id: int, pad_id: int):
    """The scripted Llama: greedy decoding from any token follows `chain`."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    hidden = config.hidden_size
    if len(chain) + 1 > hidden:
        raise SystemExit("chain longer than the hidden size")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        # Class 0: every token not in the chain; class i + 1: chain[i]. The final RMSNorm turns a
        # one-hot embedding into sqrt(hidden) on that dimension, whatever its scale.
        emb = model.model.embed_tokens.weight
        emb.zero_()
        emb[:, 0] = 1.0
        for i, tid in enumerate(chain):
            emb[tid, 0] = 0.0
            emb[tid, i + 1] = 1.0
        model.model.norm.weight.fill_(1.0)
        head = model.lm_head.weight
        head.zero_()
        head[chain[0], 0] = LOGIT_SCALE  # any other token -> first chain token
        for i in range(len(chain) - 1):
            head[chain[i + 1], i + 1] = LOGIT_SCALE  # chain[i] -> chain[i + 1]
        head[chain[0], len(chain)] = LOGIT_SCALE  # after EOS (if ever fed back): start again
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    return model


def check(model, tokenizer, chain: list[int]) -> None:
    """Greedy next token after every prompt token and every chain token is as scripted."""
    import torch

    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi there"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt.endswith("<think>\n"), prompt
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    seq = list(ids)
    with torch.no_grad():
        for expected in chain:
            logits = model(torch.tensor([seq])).logits[0, -1]
            got = int(logits.argmax())
            assert got == expected, (got, expected)
            seq.append(got)
    assert tokenizer.decode(seq[len(ids) :]) == CHAIN


def main(argv: list[str]) -> int:
    """Build into OUT_DIR (argv[1]); write the stamp last."""
    if len(argv) != 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        print(f"usage: {argv[0]} OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    stamp = out / ".stamp"
    stamp.unlink(missing_ok=True)

    tokenizer = build_tokenizer()
    chain = chain_ids(tokenizer)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    pad_id = tokenizer.convert_tokens_to_ids(PAD)
    model = build_model(len(tokenizer), chain, eos_id, pad_id)
    check(model, tokenizer, chain)

    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    info = {
        "chain": CHAIN,
        "chain_tokens": tokenizer.convert_ids_to_tokens(chain),
        "chain_ids": chain,
        "completion_tokens": len(chain),
        "vocab_size": len(tokenizer),
    }
    (out / "chain.json").write_text(json.dumps(info, indent=2) + "\n")
    stamp.write_text(source_hash() + "\n")
    print(f"tiny scripted model in {out}: vocab {len(tokenizer)}, chain of {len(chain)} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
