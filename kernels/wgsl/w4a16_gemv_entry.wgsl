@compute @workgroup_size(64)
fn {{NAME}}(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) workgroup: vec3<u32>) {
    let row0 = (workgroup.x + workgroup.y * params.dispatch_width) * ROWS;
    if (row0 >= params.n) { return; }  // uniform across the workgroup
    var x_rows: array<u32, MAX_M>;
    var y_rows: array<u32, MAX_M>;
    for (var t = 0u; t < MAX_M; t = t + 1u) {
        x_rows[t] = params.x_offset + t * params.x_stride;
        y_rows[t] = params.y_offset + t * params.y_stride;
    }
    run_rows(lane, row0, params.m, x_rows, y_rows, params.packed_offset, params.scales_offset, params.global_scale,
             params.n, params.k);
}
