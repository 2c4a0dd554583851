"""Writes the ModelOpt reference for `gemv quantize`: a small model and NVIDIA ModelOpt's NVFP4 export of it.

Run through `cargo xtask fixtures --modelopt` (a venv under target/ with pinned torch and
nvidia-modelopt; several GB, so CI does not regenerate it). Writes into the given directory:

  input.safetensors     a small "model": fused q/k/v and gate/up projections with different
                        magnitudes, an o_proj and down_proj full of edge cases, a norm, the
                        embeddings and the output head (left unquantized by default);
  expected.safetensors  for every quantized weight W: W (U8, packed E2M1), W_scale (F8_E4M3) and
                        W_scale_2 (F32), computed by ModelOpt's own functions in the order its
                        unified HF export calls them for a weight-only NVFP4 layer:
                          weight_scale_2 = NVFP4QTensor.get_weights_scaling_factor_2(fused group)
                          weight_scale   = NVFP4QTensor.get_weights_scaling_factor(W, 16, scale_2)
                          W              = NVFP4QTensor.quantize(W, 16, weight_scale, scale_2)
                        (the export's `preprocess_linear_fusion` gives q/k/v and gate/up the
                        largest amax of the group, which is what the concatenation computes);
  quantization_config.json
                        the `quantization_config` ModelOpt's export puts into config.json for a
                        weight-only NVFP4 model (quant_algo W4A16_NVFP4) that leaves the head and
                        the embeddings unquantized, from its own `convert_hf_quant_config_format`
                        (the producer entry left out: it names the tool that wrote the model).
"""
import json
import sys

import modelopt
import safetensors.torch
import torch
from modelopt.torch.export.convert_hf_config import convert_hf_quant_config_format
from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

K = 64
BLOCK = 16


def edge_rows(dtype):
    """Rows whose 16-blocks reach ModelOpt's special cases, each block annotated."""
    big = 3.0
    blocks = [
        [big] + [0.1 * i for i in range(15)],            # sets the tensor's amax
        [0.0] * 16,                                       # all-zero block: scale forced to 1.0
        [-0.0] * 16,                                      # negative zeros: code 0, not 8
        [1e-6, -1e-6] * 8,                                # far below amax: scale clamped to 2^-9
        [2e-5 * (i - 8) for i in range(16)],              # subnormal E4M3 scale range
        [-1e-3, 1e-3] + [-1e-5] * 14,                     # tiny negatives: code 8 (signed zero)
        [6.0 * t / 6.0 for t in (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0)] * 2,  # E2M1 ties
        [-0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0, -6.0] * 2,
        [0.5 * (-1) ** i * (i + 1) for i in range(16)],
        [1e-4 * (i + 1) for i in range(16)],
        [-big] + [0.0] * 15,
        [0.0] * 15 + [1e-30],                             # one value, scale clamped
    ]
    while len(blocks) % (K // BLOCK):
        blocks.append([0.01 * (i - 7) for i in range(16)])
    flat = torch.tensor([v for b in blocks for v in b], dtype=torch.float32)
    return flat.reshape(-1, K).to(dtype)


def rounding_rows(amax, block_maxima, dtype):
    """Blocks whose scale ratio lands where ModelOpt's f32 order, `block_amax / (6 * scale_2)`,
    and the other order, `block_amax / 6 / scale_2`, round to different E4M3 codes (found by a
    search over BF16 values)."""
    blocks = [[amax] + [0.0] * 15] + [[m, -m / 2] + [m / 4] * 14 for m in block_maxima]
    while len(blocks) % (K // BLOCK):
        blocks.append([amax / 3] * 16)
    flat = torch.tensor([v for b in blocks for v in b], dtype=torch.float32)
    return flat.reshape(-1, K).to(dtype)


def random(gen, rows, scale, dtype):
    values = torch.randn(rows, K, generator=gen) * scale
    # Heavy-tailed blocks and whole small rows, as real weights have.
    values[0, :BLOCK] *= 40.0
    values[-1] *= 1e-3
    return values.to(dtype)


def export(weights, expected):
    """ModelOpt's export of one fused group (a list of (name, tensor))."""
    group = torch.cat([w for _, w in weights], dim=0)
    scale_2 = NVFP4QTensor.get_weights_scaling_factor_2(group)
    for name, weight in weights:
        scale, _ = NVFP4QTensor.get_weights_scaling_factor(weight, BLOCK, scale_2)
        packed = NVFP4QTensor.quantize(weight, BLOCK, scale, scale_2)[0]._quantized_data
        expected[name] = packed.contiguous()
        expected[name + "_scale"] = scale.contiguous()
        expected[name + "_scale_2"] = scale_2.reshape(()).to(torch.float32).clone()


def main(directory):
    gen = torch.Generator().manual_seed(20261201)
    bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    p = "model.layers.0."
    model = {
        p + "self_attn.q_proj.weight": random(gen, 8, 0.05, bf16),
        p + "self_attn.k_proj.weight": random(gen, 4, 0.5, bf16),    # largest: sets q/v's scale_2
        p + "self_attn.v_proj.weight": random(gen, 4, 0.002, bf16),
        p + "self_attn.o_proj.weight": edge_rows(bf16),
        p + "mlp.gate_proj.weight": random(gen, 8, 0.02, f16),
        p + "mlp.up_proj.weight": random(gen, 8, 0.2, f16),
        p + "mlp.down_proj.weight": edge_rows(f32),
        p + "input_layernorm.weight": torch.ones(K, dtype=bf16),
        "model.layers.1.self_attn.o_proj.weight": rounding_rows(1.0, [2.0**-16, 1.5616416931152344e-05], bf16),
        "model.layers.1.mlp.down_proj.weight": rounding_rows(1.09375, [5.9604644775390625e-05, 1.1920928955078125e-04], bf16),
        "model.embed_tokens.weight": random(gen, 8, 1.0, bf16),
        "lm_head.weight": random(gen, 8, 1.0, bf16),
    }
    expected = {}
    export([(n, model[n]) for n in model if ".self_attn." in n and n.split(".")[-2] in ("q_proj", "k_proj", "v_proj")],
           expected)
    export([(n, model[n]) for n in model if n.split(".")[-2] in ("gate_proj", "up_proj")], expected)
    for name in model:
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            export([(name, model[name])], expected)
    versions = {"torch": torch.__version__, "nvidia-modelopt": modelopt.__version__}
    safetensors.torch.save_file(model, f"{directory}/input.safetensors", metadata={"generator": "modelopt_fixture.py"})
    safetensors.torch.save_file(expected, f"{directory}/expected.safetensors", metadata=versions)
    hf_quant_config = {
        "quantization": {
            "quant_algo": "W4A16_NVFP4",
            "kv_cache_quant_algo": None,
            "group_size": BLOCK,
            "exclude_modules": ["lm_head", "model.embed_tokens"],
        }
    }
    with open(f"{directory}/quantization_config.json", "w") as f:
        json.dump(convert_hf_quant_config_format(hf_quant_config), f, indent=4)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
