"""Tunix's sampler (`google-tunix`) as a benchmark peer, served over stdin/stdout to `bench_sampler.py`.

Runs in Tunix's own virtualenv (its dependencies are not ours), e.g.

  python -m venv --system-site-packages /tmp/tunix_venv && /tmp/tunix_venv/bin/pip install google-tunix==0.1.7
  python studies/benchmarks/bench_sampler.py --tunix_python /tmp/tunix_venv/bin/python

It loads the HF directory `bench_sampler.py` saved (the same weights, via safetensors) into Tunix's Qwen3,
prints one JSON line {"ready": true, "tunix": version} and then answers one request per stdin line,
{"prompts": [[token ids], ...], "new_tokens": N}, with {"seconds": wall time of the call, "tokens": [[...]]}:
greedy, no end-of-sequence id (every row decodes N tokens), no BOS added, prompts left-padded by Tunix.
A sampler is built per cache size (the prompt bucket + N, as Tunix requires) and reused.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


class IdTokenizer:
    """Token ids written as text ("12 7 993"), so Tunix's string interface passes our ids through unchanged."""

    def encode(self, text, **kwargs):
        return [int(t) for t in text.split()]

    def decode(self, ids, **kwargs):
        return " ".join(str(int(i)) for i in ids)

    def bos_id(self):
        return 0  # falsy: Tunix prepends no BOS

    def eos_id(self):
        return -1

    def pad_id(self):
        return 0


def tunix_config(model_dir: str):
    from tunix.models.qwen3 import model as model_lib

    with open(f"{model_dir}/config.json") as f:
        hf = json.load(f)
    rope = hf.get("rope_theta") or (hf.get("rope_parameters") or {}).get("rope_theta", 1_000_000)
    return model_lib.ModelConfig(
        num_layers=hf["num_hidden_layers"], vocab_size=hf["vocab_size"], embed_dim=hf["hidden_size"],
        hidden_dim=hf["intermediate_size"], num_heads=hf["num_attention_heads"], head_dim=hf["head_dim"],
        num_kv_heads=hf["num_key_value_heads"], rope_theta=int(rope), norm_eps=hf["rms_norm_eps"],
        use_tied_embedding=hf.get("tie_word_embeddings", False))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True)
    args = parser.parse_args()
    import tunix
    from tunix.generate import sampler as sampler_lib
    from tunix.generate import utils
    from tunix.models.qwen3 import params as params_lib

    config = tunix_config(args.model_dir)
    model = params_lib.create_model_from_safe_tensors(args.model_dir, config)
    samplers = {}
    print(json.dumps({"ready": True, "tunix": tunix.__version__}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        prompts, new_tokens = request["prompts"], int(request["new_tokens"])
        cache = utils.next_power_of_2(max(map(len, prompts))) + new_tokens
        if cache not in samplers:
            samplers[cache] = sampler_lib.Sampler(model, IdTokenizer(), sampler_lib.CacheConfig(
                cache_size=cache, num_layers=config.num_layers, num_kv_heads=config.num_kv_heads,
                head_dim=config.head_dim))
        texts = [" ".join(map(str, p)) for p in prompts]
        t0 = time.perf_counter()
        out = samplers[cache](texts, max_generation_steps=new_tokens, temperature=0.0, eos_tokens=[-1])
        seconds = time.perf_counter() - t0
        tokens = [[int(t) for t in row][:new_tokens] for row in out.tokens]
        print(json.dumps({"seconds": seconds, "tokens": tokens}), flush=True)


if __name__ == "__main__":
    main()
