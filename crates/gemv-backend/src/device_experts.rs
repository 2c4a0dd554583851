//! A mixture-of-experts layer's weights uploaded once, then routed tokens run through them: in one
//! grouped launch ([`GpuBackend::launch_grouped`](crate::GpuBackend::launch_grouped)), or as one launch per (token, slot) pair, the
//! way an engine without a grouped kernel runs the layer (the baseline `gemv bench --moe` times).

use crate::device_matrix::BackendRef;
use crate::{BufferRange, DeviceBuffer, GemvArgs, GroupedArgs, ResolvedTiers, Result};
use gemv_core::{CoreError, Family, GemvCall, GroupedCall, GroupedKernelSpec, Nvfp4ExpertsView};

/// E NVFP4 matrices of one shape resident on a backend, stacked (`[E][N][K/2]`, `[E][N][K/16]`)
/// with their global scales (one shared or one each) in device memory. Frees its buffers on drop.
pub struct DeviceExperts<B: BackendRef> {
    backend: B,
    /// packed, scales, global scales.
    buffers: [DeviceBuffer; 3],
    /// The global scales as uploaded (one shared, or one per expert), for single launches.
    global_scales: Vec<f32>,
    experts: usize,
    n: usize,
    k: usize,
}

impl<B: BackendRef> DeviceExperts<B> {
    /// Uploads a validated stack.
    pub fn upload(holder: B, weights: &Nvfp4ExpertsView<'_>) -> Result<Self> {
        let global_scales: Vec<u8> = weights.global_scales().iter().flat_map(|s| s.to_le_bytes()).collect();
        let contents = [weights.packed(), weights.scales(), &global_scales[..]];
        let mut buffers = Vec::with_capacity(3);
        for bytes in contents {
            match holder.backend().alloc(bytes.len()) {
                Ok(buffer) => buffers.push(buffer),
                Err(error) => {
                    for buffer in buffers {
                        let _ = holder.backend().free(buffer);
                    }
                    return Err(error);
                }
            }
        }
        let buffers = [buffers[0], buffers[1], buffers[2]];
        // From here the stack owns its buffers: an upload error drops it, which frees them.
        let experts = Self {
            backend: holder,
            buffers,
            global_scales: weights.global_scales().to_vec(),
            experts: weights.experts(),
            n: weights.n(),
            k: weights.k(),
        };
        for (buffer, bytes) in experts.buffers.iter().zip(contents) {
            experts.backend.backend().upload(buffer.whole(), bytes)?;
        }
        Ok(experts)
    }

    /// Experts.
    pub fn experts(&self) -> usize {
        self.experts
    }

    /// Weight rows of each expert.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Weight columns of each expert.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The grouped launch's arguments over device X `[m][K]`, routing `[m][top_k]` (u32) and Y
    /// `[m][top_k][N]` in `family`: what an engine passes to
    /// [`GpuBackend::launch_grouped`](crate::GpuBackend::launch_grouped) each step.
    pub fn args(
        &self,
        x: BufferRange,
        routing: BufferRange,
        y: BufferRange,
        m: usize,
        top_k: usize,
        family: Family,
    ) -> GroupedArgs {
        let [packed, scales, global_scales] = self.buffers.map(|buffer| buffer.whole());
        GroupedArgs {
            x,
            packed,
            scales,
            global_scales,
            routing,
            y,
            experts: self.experts,
            m,
            top_k,
            n: self.n,
            k: self.k,
            family,
            forced_kernel: None,
        }
    }

    /// Expert `e`'s single-matrix launch arguments for one token: X row `token` of `x` (`[m][K]`),
    /// Y row `row` of `y` (`[m][top_k][N]`, a row per pair). What one pair's launch of a layer run
    /// without a grouped kernel reads and writes.
    ///
    /// # Panics
    /// When `e >= experts`.
    pub fn pair_args(&self, e: usize, x: DeviceBuffer, token: usize, y: DeviceBuffer, row: usize) -> GemvArgs {
        assert!(e < self.experts, "expert {e} of {}", self.experts);
        let (packed_len, scales_len) = (self.n * self.k / 2, self.n * self.k / gemv_core::GROUP_SIZE);
        let global_scale = gemv_core::expert_global_scale(&self.global_scales, e);
        GemvArgs::contiguous(
            x.range(2 * token * self.k, 2 * self.k),
            self.buffers[0].range(e * packed_len, packed_len),
            self.buffers[1].range(e * scales_len, scales_len),
            y.range(2 * row * self.n, 2 * self.n),
            global_scale,
            1,
            self.n,
            self.k,
        )
    }

    /// `Y[t][s] = W[ids[t][s]] X[t]` for host X `[m][K]` and ids `[m][top_k]` in one grouped
    /// launch, in the family the call's policy picks where `tiers` resolved (the fast family only
    /// where asked for and present); returns Y `[m][top_k][N]`. The routing is validated here
    /// first, so an id past the experts is [`CoreError::ExpertOutOfRange`] on every backend.
    pub fn call(&self, tiers: &ResolvedTiers, x: &[u16], ids: &[u32], call: &GroupedCall) -> Result<Vec<u16>> {
        let family = tiers.family(call.family())?;
        self.launch_grouped(x, ids, call, family, None)
    }

    /// [`Self::call`] on the grouped kernel `kernel` (a benchmark's or a test's choice), in its
    /// family, whatever the selector would pick; the call's family policy does not apply.
    pub fn call_on(
        &self,
        kernel: &'static GroupedKernelSpec,
        x: &[u16],
        ids: &[u32],
        call: &GroupedCall,
    ) -> Result<Vec<u16>> {
        self.launch_grouped(x, ids, call, kernel.family, Some(kernel))
    }

    /// Uploads X and the validated routing, and runs one grouped launch in `family`, on `forced`
    /// where given.
    fn launch_grouped(
        &self,
        x: &[u16],
        ids: &[u32],
        call: &GroupedCall,
        family: Family,
        forced: Option<&'static GroupedKernelSpec>,
    ) -> Result<Vec<u16>> {
        let routing = call.routing(ids, self.experts)?;
        self.run(x, call, |x_buf, y_buf| {
            let backend = self.backend.backend();
            let routing_buf = backend.alloc(4 * routing.pairs())?;
            let launched = (|| {
                let bytes: Vec<u8> = routing.ids().iter().flat_map(|id| id.to_le_bytes()).collect();
                backend.upload(routing_buf.whole(), &bytes)?;
                let args = self.args(x_buf.whole(), routing_buf.whole(), y_buf.whole(), call.m(), call.top_k(), family);
                backend.launch_grouped(&GroupedArgs { forced_kernel: forced, ..args })
            })();
            let synchronized = launched.and_then(|()| backend.synchronize());
            let _ = backend.free(routing_buf);
            synchronized
        })
    }

    /// The same outputs as [`Self::call`] by one single-matrix launch per (token, slot) pair, each
    /// on the M = 1 plan of `tiers` in the call's family: how a layer runs without a grouped
    /// kernel, each expert's weights read once per pair. The routing stays on the host.
    pub fn call_separately(
        &self,
        tiers: &ResolvedTiers,
        x: &[u16],
        ids: &[u32],
        call: &GroupedCall,
    ) -> Result<Vec<u16>> {
        let routing = call.routing(ids, self.experts)?;
        let plan = tiers.plan_call(&GemvCall::new(1).with_family(call.family()))?;
        self.run(x, call, |x_buf, y_buf| {
            for (pair, &id) in routing.ids().iter().enumerate() {
                let args = self.pair_args(id as usize, x_buf, pair / call.top_k(), y_buf, pair);
                for planned in &plan {
                    self.backend.backend().launch_gemv(planned.kernel, &args)?;
                }
            }
            self.backend.backend().synchronize()
        })
    }

    /// Uploads X (exactly `[m][K]`), runs `launch` over X and Y buffers, returns Y `[m][top_k][N]`.
    fn run(
        &self,
        x: &[u16],
        call: &GroupedCall,
        launch: impl FnOnce(DeviceBuffer, DeviceBuffer) -> Result<()>,
    ) -> Result<Vec<u16>> {
        let (x_len, y_len) = call.elements(self.n, self.k)?;
        if x.len() != x_len {
            return Err(CoreError::LengthMismatch {
                what: "x",
                expected: x_len,
                found: x.len(),
                m: call.m(),
                n: self.n,
                k: self.k,
            }
            .into());
        }
        let backend = self.backend.backend();
        let x_buf = backend.alloc(2 * x_len)?;
        let result = backend.alloc(2 * y_len).and_then(|y_buf| {
            let outcome = (|| {
                backend.upload(x_buf.whole(), bytemuck::cast_slice(x))?;
                launch(x_buf, y_buf)?;
                let mut y = vec![0u16; y_len];
                backend.download(y_buf.whole(), bytemuck::cast_slice_mut(&mut y))?;
                Ok(y)
            })();
            let _ = backend.free(y_buf);
            outcome
        });
        let _ = backend.free(x_buf);
        result
    }
}

impl<B: BackendRef> Drop for DeviceExperts<B> {
    fn drop(&mut self) {
        for buffer in self.buffers {
            let _ = self.backend.backend().free(buffer);
        }
    }
}
