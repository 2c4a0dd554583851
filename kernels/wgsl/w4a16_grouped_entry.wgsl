@group(0) @binding(5) var<storage, read> global_scale_words: array<u32>;
@group(0) @binding(6) var<storage, read> routing_words: array<u32>;

fn routing_id(pair: u32) -> u32 {
    let i = params.routing_offset + pair;
    if (i < arrayLength(&routing_words)) { return routing_words[i]; }
    return 0xFFFFFFFFu;
}

// Workgroup (pair, row block): an expert's pairs fall into chunks of MAX_M; the workgroup of a
// chunk's first pair computes the chunk's pairs (X row pair / top_k, Y row pair), so each touched
// expert is read once per chunk of its pairs and a popular expert's chunks run side by side; the
// workgroups of the other pairs return. A pair whose id is past the experts reads no weights: its
// rows of Y are NaN.
@compute @workgroup_size(64)
fn {{NAME}}(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) workgroup: vec3<u32>) {
    let blocks = (params.n + ROWS - 1u) / ROWS;
    let pairs = params.m * params.top_k;
    let index = workgroup.x + workgroup.y * params.dispatch_width;
    if (index >= pairs * blocks) { return; }  // uniform across the workgroup
    let pair = index / blocks;
    let row0 = (index % blocks) * ROWS;
    let expert = routing_id(pair);
    if (expert >= params.experts) {
        if (lane < ROWS && row0 + lane < params.n) {
            store_y(params.y_offset + pair * params.n + row0 + lane, 0x7FC0u);
        }
        return;
    }
    // The pair's rank among its expert's pairs: only a chunk's first pair computes.
    var rank = 0u;
    for (var q = 0u; q < pair; q = q + 1u) {
        if (routing_id(q) == expert) { rank = rank + 1u; }
    }
    if (rank % MAX_M != 0u) { return; }
    let per_expert = (params.global_scales_offset >> 31u) != 0u;
    let scale_word = (params.global_scales_offset & 0x7FFFFFFFu) + select(0u, expert, per_expert);
    var global_scale = 0.0;
    if (scale_word < arrayLength(&global_scale_words)) { global_scale = bitcast<f32>(global_scale_words[scale_word]); }
    let packed_offset = params.packed_offset + expert * params.n * (params.k / 2u);
    let scales_offset = params.scales_offset + expert * params.n * (params.k / GROUP);
    var x_rows: array<u32, MAX_M>;
    var y_rows: array<u32, MAX_M>;
    var m = 0u;
    for (var q = pair; q < pairs && m < MAX_M; q = q + 1u) {
        if (routing_id(q) == expert) {
            x_rows[m] = params.x_offset + (q / params.top_k) * params.k;
            y_rows[m] = params.y_offset + q * params.n;
            m = m + 1u;
        }
    }
    run_rows(lane, row0, m, x_rows, y_rows, packed_offset, scales_offset, global_scale, params.n, params.k);
}
