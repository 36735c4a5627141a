// CUDA backend: memory, metadata upload, and the element-wise dense ops as small kernels (the
// products are in products.cu).
#include <cstring>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

size_t size_class(size_t bytes) {
    bytes = std::max<size_t>(bytes, 256);
    if (bytes >= (size_t{1} << 20)) return (bytes + (size_t{1} << 20) - 1) >> 20 << 20;
    size_t c = 256;
    while (c < bytes) c <<= 1;
    return c;
}

__global__ void embed_kernel(const int* ids, const void* table, bool bf16, int64_t d, int hc, float* out) {
    pdl_prologue();
    int64_t row = blockIdx.x;
    int64_t id = ids[row];
    // A chunk's loads all go out before its stores (out may alias the table as far as the
    // compiler knows).
    for (int64_t base = 0; base < d; base += kRowRegs * blockDim.x) {
        float v[kRowRegs];
#pragma unroll
        for (int i = 0; i < kRowRegs; ++i) {
            int64_t c = base + threadIdx.x + i * blockDim.x;
            v[i] = c >= d ? 0.0f
                 : bf16   ? __bfloat162float(static_cast<const __nv_bfloat16*>(table)[id * d + c])
                          : static_cast<const float*>(table)[id * d + c];
        }
#pragma unroll
        for (int i = 0; i < kRowRegs; ++i) {
            int64_t c = base + threadIdx.x + i * blockDim.x;
            if (c < d)
                for (int s = 0; s < hc; ++s) out[(row * hc + s) * d + c] = v[i];
        }
    }
}

// out = in / rms(in) (* w) for one row of `cols`, by the whole block (out may be in). Rows of up
// to kRowRegs strides keep their values (and weights) in registers between the two passes, every
// load issued before the first use, so a lone decode row waits one memory latency, not one per
// stride; the sum of squares adds in the same order as the strided loop below.
__device__ void rms_norm_row(const float* in, const float* w, float eps, int64_t cols, float* out) {
    if (cols <= kRowRegs * static_cast<int64_t>(blockDim.x)) {
        float v[kRowRegs], wv[kRowRegs];
#pragma unroll
        for (int i = 0; i < kRowRegs; ++i) {
            int64_t c = threadIdx.x + i * static_cast<int64_t>(blockDim.x);
            v[i] = c < cols ? in[c] : 0.0f;
            wv[i] = c < cols && w ? w[c] : 1.0f;
        }
        float ss = 0;
#pragma unroll
        for (int i = 0; i < kRowRegs; ++i) ss += v[i] * v[i];
        ss = block_sum(ss);
        float inv = rsqrtf(ss / cols + eps);
#pragma unroll
        for (int i = 0; i < kRowRegs; ++i) {
            int64_t c = threadIdx.x + i * static_cast<int64_t>(blockDim.x);
            if (c < cols) out[c] = w ? wv[i] * (v[i] * inv) : v[i] * inv;
        }
        return;
    }
    float ss = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) ss += in[c] * in[c];
    ss = block_sum(ss);
    float inv = rsqrtf(ss / cols + eps);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = w ? w[c] * (in[c] * inv) : in[c] * inv;
}

__global__ void rms_norm_kernel(const float* x, const float* w, float eps, int64_t cols, float* y) {
    pdl_prologue();
    rms_norm_row(x + blockIdx.x * cols, w, eps, cols, y + blockIdx.x * cols);
}

__global__ void rope_kernel(float* x, int64_t cols, const long long* pos, int group, const float* inv_freq, int rope_dim,
                            float scale, bool inverse) {
    pdl_prologue();
    int64_t row = blockIdx.x;
    rope_pairs(x + row * cols, static_cast<int>(cols), pos[row / group], inv_freq, rope_dim, scale, inverse, threadIdx.x,
               blockDim.x);
}

// rms_norm_kernel then rope_kernel on one row, in one launch (q heads and the kv row of decode).
__global__ void rms_norm_rope_kernel(float* x, const float* w, float eps, int64_t cols, const long long* pos, int group,
                                     const float* inv_freq, int rope_dim, float scale) {
    pdl_prologue();
    float* row = x + blockIdx.x * cols;
    rms_norm_row(row, w, eps, cols, row);
    __syncthreads();  // rope pairs are read by other threads than the ones that wrote them
    rope_pairs(row, static_cast<int>(cols), pos[blockIdx.x / group], inv_freq, rope_dim, scale, false, threadIdx.x,
               blockDim.x);
}

// norm_rope_many: one block per row of any job; the job's rows follow the previous job's.
constexpr int kMaxNormRopeJobs = 4;
struct NormRopeJobs {
    struct Job {
        float* x;
        const float* weight;
        const float* inv_freq;  // null: no rope
        int64_t cols;
        int first_block, group, rope_dim;
        float eps, rope_scale;
        bool norm;
    } job[kMaxNormRopeJobs];
    int count;
    const long long* positions;
};

__global__ void norm_rope_many_kernel(NormRopeJobs a) {
    pdl_prologue();
    int j = 0;
    while (j + 1 < a.count && static_cast<int>(blockIdx.x) >= a.job[j + 1].first_block) ++j;
    const NormRopeJobs::Job& job = a.job[j];
    int64_t r = blockIdx.x - job.first_block;
    float* row = job.x + r * job.cols;
    if (job.norm) {
        rms_norm_row(row, job.weight, job.eps, job.cols, row);
        __syncthreads();  // rope pairs are read by other threads than the ones that wrote them
    }
    if (job.inv_freq != nullptr)
        rope_pairs(row, static_cast<int>(job.cols), a.positions[r / job.group], job.inv_freq, job.rope_dim, job.rope_scale,
                   false, threadIdx.x, blockDim.x);
}

__global__ void gather_rows_kernel(const float* x, const int* rows, int64_t cols, float* out) {
    pdl_prologue();
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[blockIdx.x * cols + c] = x[rows[blockIdx.x] * cols + c];
}

// Element-wise kernels stride over the tensor with a grid of a few waves (see elementwise_blocks).
__global__ void add_kernel(const float* x, float* y, int64_t n) {
    pdl_prologue();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] += x[i];
}

__global__ void swiglu_kernel(const float* g, const float* u, float limit, float* out, int64_t n) {
    pdl_prologue();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float gv = fminf(g[i], limit), uv = fminf(fmaxf(u[i], -limit), limit);
        out[i] = gv / (1.0f + expf(-gv)) * uv;
    }
}

// ids[row] = the row's largest logit's index, ties to the lower one: each thread scans its stride
// (the first of equals stays), then the block's argmax keeps the lower index of equals.
__global__ void argmax_rows_kernel(const float* logits, int64_t cols, int* ids) {
    pdl_prologue();
    const float* row = logits + blockIdx.x * cols;
    float best = -INFINITY;
    int at = -1;
#pragma unroll 8
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = row[c];
        if (at < 0 || v > best) best = v, at = static_cast<int>(c);
    }
    int winner = block_argmax(best, at);
    if (threadIdx.x == 0) ids[blockIdx.x] = winner;
}

}  // namespace

DeviceAllocator::~DeviceAllocator() {
    for (auto& [cls, blocks] : free_)
        for (void* p : blocks) cudaFree(p);
}

std::shared_ptr<void> DeviceAllocator::allocate(size_t bytes) {
    size_t cls = size_class(bytes);
    void* p = nullptr;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto& list = free_[cls];
        if (!list.empty()) {
            p = list.back();
            list.pop_back();
        }
    }
    if (p == nullptr) {
        if (cudaMalloc(&p, cls) != cudaSuccess) {
            cudaGetLastError();
            raise("out of GPU memory allocating " + std::to_string(cls) + " bytes");
        }
    }
    std::weak_ptr<DeviceAllocator> self = weak_from_this();
    return std::shared_ptr<void>(p, [self, cls](void* q) {
        if (auto a = self.lock()) {
            std::lock_guard<std::mutex> lock(a->mutex_);
            a->free_[cls].push_back(q);  // stream-ordered reuse: every op runs on the one stream
        } else {
            cudaFree(q);
        }
    });
}

CudaBackend::CudaBackend(int device) : device_(device) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device) {
        cudaGetLastError();
        raise("no CUDA device " + std::to_string(device) + " (found " + std::to_string(count) + ")");
    }
    DI_CUDA_CHECK(cudaSetDevice(device));
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DI_CUBLAS_CHECK(cublasCreate(&cublas_));
    DI_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    constexpr size_t kCublasWorkspace = 32u << 20;
    DI_CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspace));
    DI_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace));
    exec_ = std::make_unique<CudaExecution>(stream_);
    attention_ = std::make_unique<AttentionFamily>(*this);
    moe_ = std::make_unique<MoeFamily>(*this);
    mhc_ = std::make_unique<MhcFamily>(*this);
}

CudaBackend::~CudaBackend() {
    if (exec_) exec_->release_graphs();
    cudaStreamSynchronize(stream_);
    destroy_transfer_queue();
    if (staging_ != nullptr) cudaFreeHost(staging_);
    meta_.clear();
    cublasDestroy(cublas_);
    cudaFree(cublas_workspace_);
    cudaStreamDestroy(stream_);
}

Tensor CudaBackend::empty(DType dtype, std::vector<int64_t> shape) {
    // The current device is per host thread and the engine calls from its own thread; every step
    // starts with an allocation or an upload, so binding here covers all later launches.
    DI_CUDA_CHECK(cudaSetDevice(device_));
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    // Rows of block-quantized weights (FP8, MXFP4, Q8) carry their scales: sized as rows.
    int64_t last = shape.empty() ? 1 : shape.back();
    size_t bytes = last == 0 ? 0 : static_cast<size_t>(n / last) * dtype_row_bytes(dtype, last);
    std::shared_ptr<void> block = allocator_->allocate(bytes);
    void* p = block.get();
    return Tensor::wrap(p, dtype, std::move(shape), std::move(block), Device::kCuda);
}

Tensor CudaBackend::zeros(DType dtype, std::vector<int64_t> shape) {
    Tensor t = empty(dtype, std::move(shape));
    DI_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream_));
    return t;
}

void CudaBackend::copy_to_device(void* dst, const void* src, size_t bytes) {
    constexpr size_t kStagingBytes = 8u << 20;
    if (bytes > kStagingBytes / 4) {  // weights at load time: straight from pageable memory
        exec_->graphs().flush();              // (not a copy a graph may hold)
        DI_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
        return;
    }
    if (staging_ == nullptr) DI_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&staging_), kStagingBytes, cudaHostAllocDefault));
    size_t span = (bytes + 255) & ~size_t{255};
    if (staging_used_ + span > kStagingBytes) {  // wrap: every copy queued from the ring must have run
        exec_->graphs().flush();                          // (captured copies read the ring when launched)
        DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
        staging_used_ = 0;
    }
    std::memcpy(staging_ + staging_used_, src, bytes);
    DI_CUDA_CHECK(cudaMemcpyAsync(dst, staging_ + staging_used_, bytes, cudaMemcpyHostToDevice, stream_));
    staging_used_ += span;
}

Tensor CudaBackend::upload(const Tensor& host) {
    DI_CUDA_OP("upload");
    DI_CUDA_REQUIRE(host.device() == Device::kCpu, "upload: tensor is already on the GPU");
    Tensor t = empty(host.dtype(), host.shape());
    copy_to_device(t.raw(), host.raw(), host.nbytes());
    return t;
}

void CudaBackend::download(const Tensor& src, void* host_dst) {
    exec_->graphs().flush();
    DI_CUDA_CHECK(cudaMemcpyAsync(host_dst, src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, stream_));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::pair<const DeviceSeq*, const int*> CudaBackend::upload_seqs(std::span<const SeqSlice> seqs, const EntryStore* store) {
    std::vector<DeviceSeq> ds;
    std::vector<int> tables;
    for (size_t i = 0; i < seqs.size(); ++i) {
        ds.push_back({seqs[i].token_begin, seqs[i].num_tokens, seqs[i].start_pos, seqs[i].state_idx,
                      static_cast<int>(tables.size()), seqs[i].window_from});
        if (store) tables.insert(tables.end(), store->tables[i].begin(), store->tables[i].end());
    }
    size_t head = ds.size() * sizeof(DeviceSeq);
    std::vector<char> bytes(head + tables.size() * sizeof(int) + 16);
    std::memcpy(bytes.data(), ds.data(), head);
    std::memcpy(bytes.data() + head, tables.data(), tables.size() * sizeof(int));
    auto* base = static_cast<const char*>(device_copy_of(std::move(bytes)).raw());
    return {reinterpret_cast<const DeviceSeq*>(base), reinterpret_cast<const int*>(base + head)};
}

const Tensor& CudaBackend::device_copy_of(std::vector<char> bytes) {
    // Every layer uploads the same slices (and one of two block tables): reuse a recent identical
    // upload instead of queueing another copy. Kernels only read metadata, so a kept copy stays valid.
    for (auto& [host, dev] : meta_)
        if (host == bytes) return dev;
    constexpr size_t kKept = 8;
    if (meta_.size() == kKept) meta_.erase(meta_.begin());
    Tensor dev = empty(DType::kU8, {static_cast<int64_t>(bytes.size())});
    copy_to_device(dev.raw(), bytes.data(), bytes.size());
    meta_.emplace_back(std::move(bytes), std::move(dev));
    return meta_.back().second;
}

int CudaBackend::elementwise_blocks(int64_t n) const {
    // A block start costs about as much as a few hundred elements; a few waves keep every SM busy.
    return std::min(blocks_for(n, 256), sm_count_ * 16);
}

void CudaBackend::embed(const Tensor& ids, const Tensor& table, int hc, Tensor& out) {
    DI_CUDA_OP("embed");
    int64_t n = ids.numel(), d = table.dim(1);
    if (n == 0) return;
    launch_pdl(embed_kernel, n, 256, 0, stream_, ids.data<int>(), table.raw(), table.dtype() == DType::kBF16, d, hc,
               out.data<float>());
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& y) {
    DI_CUDA_OP("rms_norm");
    int64_t cols = x.dim(-1), rows = x.numel() / cols;
    if (rows == 0) return;
    launch_pdl(rms_norm_kernel, rows, 256, 0, stream_, x.data<float>(), weight ? weight->data<float>() : nullptr, eps,
               cols, y.data<float>());
}

void CudaBackend::rope(Tensor& x, const Tensor& positions, int group, const Rope& r, bool inverse) {
    DI_CUDA_OP("rope");
    int64_t cols = x.dim(-1), rows = x.numel() / cols;
    if (rows == 0) return;
    launch_pdl(rope_kernel, rows, 32, 0, stream_, x.data<float>(), cols, positions.data<long long>(), group,
               r.inv_freq.data<float>(), r.rope_dim, r.scale, inverse);
}

void CudaBackend::rms_norm_rope(Tensor& x, const Tensor* weight, float eps, const Tensor& positions, int group,
                                const Rope& r) {
    DI_CUDA_OP("rms_norm_rope");
    int64_t cols = x.dim(-1), rows = x.numel() / cols;
    if (rows == 0) return;
    launch_pdl(rms_norm_rope_kernel, rows, 128, 0, stream_, x.data<float>(), weight ? weight->data<float>() : nullptr,
               eps, cols, positions.data<long long>(), group, r.inv_freq.data<float>(), r.rope_dim, r.scale);
}

void CudaBackend::norm_rope_many(std::span<const NormRopeJob> jobs, const Tensor& positions) {
    DI_CUDA_OP("norm_rope_many");
    if (jobs.size() > kMaxNormRopeJobs) {
        Backend::norm_rope_many(jobs, positions);
        return;
    }
    NormRopeJobs a{};
    int blocks = 0;
    for (const NormRopeJob& j : jobs) {
        int64_t cols = j.x->dim(-1), rows = j.x->numel() / cols;
        if (rows == 0) continue;
        NormRopeJobs::Job& d = a.job[a.count++];
        d = {j.x->data<float>(), j.weight ? j.weight->data<float>() : nullptr,
             j.rope ? j.rope->inv_freq.data<float>() : nullptr, cols, blocks, j.group, j.rope ? j.rope->rope_dim : 0, j.eps,
             j.rope ? j.rope->scale : 1.0f, j.norm};
        blocks += static_cast<int>(rows);
    }
    a.positions = positions.defined() ? positions.data<long long>() : nullptr;
    launch_pdl(norm_rope_many_kernel, blocks, 128, 0, stream_, a);
}

void CudaBackend::gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) {
    DI_CUDA_OP("gather_rows");
    int64_t cols = x.numel() / x.dim(0);
    if (rows.numel() == 0) return;
    launch_pdl(gather_rows_kernel, rows.numel(), 256, 0, stream_, x.data<float>(), rows.data<int>(), cols,
               out.data<float>());
}

void CudaBackend::add(const Tensor& x, Tensor& y) {
    DI_CUDA_OP("add");
    if (x.numel() == 0) return;
    launch_pdl(add_kernel, elementwise_blocks(x.numel()), 256, 0, stream_, x.data<float>(), y.data<float>(), x.numel());
}

int CudaBackend::resident_blocks(const void* kernel, int threads) {
    auto [it, added] = resident_blocks_.try_emplace(kernel, 0);
    if (added) DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&it->second, kernel, threads, 0));
    return it->second;
}

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
    DI_CUDA_OP("copy");
    DI_CUDA_REQUIRE(src.nbytes() == dst.nbytes(), "copy: " + std::to_string(src.nbytes()) + " vs " +
                                                      std::to_string(dst.nbytes()) + " bytes");
    if (src.nbytes() > 0)
        DI_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::argmax_rows(const Tensor& logits, Tensor& ids) {
    DI_CUDA_OP("argmax_rows");
    int64_t cols = logits.dim(-1), rows = logits.numel() / std::max<int64_t>(cols, 1);
    DI_CUDA_REQUIRE(cols > 0 && cols <= INT32_MAX && ids.numel() == rows && ids.dtype() == DType::kI32,
                    "argmax_rows: logits " + logits.shape_string() + " -> ids " + ids.shape_string());
    if (rows > 0) launch_pdl(argmax_rows_kernel, rows, 1024, 0, stream_, logits.data<float>(), cols, ids.data<int>());
}

void CudaBackend::swiglu(const Tensor& gate, const Tensor& up, float limit, Tensor& out) {
    DI_CUDA_OP("swiglu");
    if (gate.numel() == 0) return;
    launch_pdl(swiglu_kernel, elementwise_blocks(gate.numel()), 256, 0, stream_, gate.data<float>(), up.data<float>(),
               limit, out.data<float>(), gate.numel());
}

}  // namespace deepinfer::kernels::cuda

namespace deepinfer::kernels {

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<cuda::CudaBackend>(device); }

}  // namespace deepinfer::kernels
