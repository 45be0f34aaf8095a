"""A CPU rollout backend for verl 0.9.1's PPO/GRPO trainer: HF `transformers` sampling behind verl's server API.

verl 0.9.1 generates through rollout *servers* (vLLM, SGLang, TensorRT-LLM), none installed on this CPU-only
machine (their usual builds need CUDA); the HF `generate` class it still ships (`verl.workers.rollout.hf_rollout.HFRollout`) no
longer fits its `BaseRollout` interface. The plugin (`trainer.verl_plugin`) registers this backend as rollout `hf` in verl's two
registries (`RolloutReplicaRegistry` and `_ROLLOUT_REGISTRY`), so stock `main_ppo` with
`actor_rollout_ref.rollout.name=hf` uses it:

- `HFRolloutServer` (a Ray actor, one per replica): holds a copy of the policy on CPU and answers verl's
  token-in/token-out `generate(prompt_ids, sampling_params, ...)` with temperature/top-k/top-p sampling and
  the log-probability of each sampled token, stopping at the tokenizer's end-of-sequence token.
- `HFReplica`: verl's `RolloutReplica` that starts that actor under the name the adapter looks up.
- `HFServerAdapter`: verl's `BaseRollout`, living in each training worker; after every update verl hands it the
  actor's full weights (`update_weights`), which rank 0 of the replica copies into the server.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

logger = logging.getLogger(__name__)

NAME = "hf"


def server_name(replica_rank: int) -> str:
    return f"{NAME}_server_{replica_rank}_0"


def _model_path(model_config: Any) -> str:
    for key in ("local_path", "path"):
        value = model_config.get(key) if hasattr(model_config, "get") else getattr(model_config, key, None)
        if value:
            return str(value)
    raise ValueError("rollout hf: the model config has neither local_path nor path")


def sample_next(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> tuple[int, float]:
    """One token from the last-position `logits` (1-D) and its log-probability under the sampling distribution.

    temperature 0 means greedy (log-probability under the unscaled distribution).
    """
    logits = logits.float()
    if temperature <= 0:
        token = int(torch.argmax(logits))
        return token, float(torch.log_softmax(logits, -1)[token])
    logits = logits / temperature
    if top_k and top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(logits, descending=True)
        cumulative = torch.softmax(ordered, -1).cumsum(-1)
        drop = cumulative - torch.softmax(ordered, -1) > top_p  # keep the smallest prefix reaching top_p
        logits[order[drop]] = float("-inf")
    logprobs = torch.log_softmax(logits, -1)
    token = int(torch.multinomial(logprobs.exp(), 1))
    return token, float(logprobs[token])


class HFRolloutServer:
    """The policy on CPU, sampling one request at a time (the tiny model needs no batching)."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int = 0) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        path = _model_path(model_config)
        self.config = config
        self.replica_rank = replica_rank
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = tokenizer.eos_token_id
        self.stop_ids = set(eos if isinstance(eos, list) else [eos])
        self.global_steps: int | None = None
        self.generator = torch.Generator().manual_seed(int(getattr(config, "seed", 0) or 0) + replica_rank)

    def _max_tokens(self, prompt_len: int, sampling_params: dict[str, Any]) -> int:
        response_length = int(self.config.response_length)
        limit = sampling_params.pop("max_tokens", None) or sampling_params.pop("max_new_tokens", None)
        budget = int(self.config.prompt_length) + response_length - prompt_len
        return max(1, min(int(limit or response_length), response_length, budget))

    @torch.no_grad()
    def _sample(self, prompt_ids: list[int], sampling_params: dict[str, Any]) -> TokenOutput:
        params = dict(sampling_params)
        max_tokens = self._max_tokens(len(prompt_ids), params)
        temperature = float(params.get("temperature", 1.0) or 0.0)
        top_k = int(params.get("top_k", -1) or -1)
        top_p = float(params.get("top_p", 1.0) or 1.0)
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long)
        past = None
        tokens: list[int] = []
        logprobs: list[float] = []
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=self.generator)))
            for _ in range(max_tokens):
                out = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = out.past_key_values
                token, logprob = sample_next(out.logits[0, -1], temperature, top_k, top_p)
                tokens.append(token)
                logprobs.append(logprob)
                if token in self.stop_ids:
                    break
                ids = torch.tensor([[token]], dtype=torch.long)
        return TokenOutput(
            token_ids=tokens,
            log_probs=logprobs if params.get("logprobs") else None,
            stop_reason="completed",
            num_preempted=0,
            extra_fields={"global_steps": self.global_steps},
        )

    async def generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str, **_: Any
    ) -> TokenOutput:
        # Runs on the actor's event loop: requests are served one after another.
        return self._sample(prompt_ids, sampling_params)

    def load_weights(self, state: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        """Copy the trainer's weights in; returns how many tensors were loaded."""
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        # A tied lm_head may be absent from the trainer's state dict; anything else missing is an error.
        missing = [
            k for k in missing if not (k == "lm_head.weight" and self.model.config.tie_word_embeddings)
        ]
        if missing or unexpected:
            raise RuntimeError(
                f"rollout hf: weights do not fit the model: missing {missing}, unexpected {unexpected}"
            )
        self.global_steps = global_steps
        return len(state)

    def get_server_address(self) -> tuple[str, int]:
        return ray.util.get_node_ip_address(), 0

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    # Memory management, request control and profiling have nothing to do on CPU with one request at a time.
    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        return {"aborted_count": 0, "request_ids": []}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict:
        return {"aborted": False, "request_id": request_id}

    async def resume_generation(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class HFReplica(RolloutReplica):
    """One `HFRolloutServer` actor per replica, on the node of the replica's first worker."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        server = (
            ray.remote(HFRolloutServer)
            .options(name=server_name(self.replica_rank), num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        )
        self.servers = [server]
        self._server_handle = server
        host, _ = await server.get_server_address.remote()
        # Not an HTTP address (the server is reached only through its actor handle), but unique per replica.
        self._server_address = f"{host}:hf-{self.replica_rank}"


class HFServerAdapter(BaseRollout):
    """verl's rollout handle inside a training worker: passes the actor's weights to the replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1, **_: Any):
        super().__init__(config, model_config, device_mesh)
        size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        rank = int(os.environ.get("RANK", "0"))
        self.replica_rank = rank // size if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % size
        self.is_leader_rank = self.rollout_rank == 0

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    @torch.no_grad()
    async def update_weights(
        self, weights, global_steps: int | None = None, wire_format: str = "named_tensors", **_
    ):
        if wire_format != "named_tensors":
            raise NotImplementedError(f"rollout hf takes full weights (named_tensors), not {wire_format!r}")
        # Every rank walks the generator: producing full tensors from FSDP shards is a collective.
        state: dict[str, torch.Tensor] = {}
        if hasattr(weights, "__aiter__"):
            async for name, tensor in weights:
                state[name] = tensor.detach().to("cpu", torch.float32, copy=True)
        else:
            for name, tensor in weights:
                state[name] = tensor.detach().to("cpu", torch.float32, copy=True)
        if self.is_leader_rank:
            server = ray.get_actor(server_name(self.replica_rank))
            await server.load_weights.remote(state, global_steps)
