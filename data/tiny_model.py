"""The local tokenizer (byte-level BPE with a ChatML chat template) and the tiny Qwen2-style causal LM.

Nothing is downloaded: the tokenizer is trained on the generated conversations with the `tokenizers`
library, and the model is initialised from a fixed seed.
"""

from __future__ import annotations

from collections.abc import Iterable

# ChatML as Qwen uses it, without a default system prompt: verl's multi-turn dataset renders each turn on
# its own and checks that the pieces concatenate to the whole conversation, which this template satisfies.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """A `PreTrainedTokenizerFast` trained on `texts`: byte-level BPE, ChatML template, `<|im_end|>` as eos."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
        model_max_length=4096,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def make_tiny_qwen2(tokenizer, seed: int, hidden_size: int = 64, layers: int = 2):
    """A freshly initialised Qwen2ForCausalLM sized for CPU (about 100 K parameters), same weights per seed."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 3,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    return model


def warm_start(
    model, tokenizer, examples: list[tuple[list[dict], str]], steps: int, seed: int, lr: float = 1e-2
):
    """Supervised warm start before RL: `steps` AdamW steps on (chat prompt, answer) pairs, loss on the answer
    and its end-of-turn token only. Teaches the tiny model the answer's shape; returns the final loss."""
    import torch

    rows = []
    for messages, answer in examples:
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        rows.append((prompt_ids, answer_ids))
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (p, a) in enumerate(rows):
        ids[i, : len(p) + len(a)] = torch.tensor(p + a)
        mask[i, : len(p) + len(a)] = 1
        labels[i, len(p) : len(p) + len(a)] = torch.tensor(a)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        batch = torch.randint(0, len(rows), (32,), generator=generator)
        loss = model(input_ids=ids[batch], attention_mask=mask[batch], labels=labels[batch]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return float(loss.detach())
