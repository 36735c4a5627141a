#include "cluster/pd/ucx_transport.h"

#include <poll.h>
#include <ucp/api/ucp.h>

#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "base/logging.h"

namespace deepinfer::cluster::pd {

namespace {

constexpr unsigned kSpanMessage = 17;  // the active-message id of a span
// How long the idle thread sleeps without an event (a signal or a send wakes it sooner).
constexpr int kIdleWaitMs = 100;

void check(ucs_status_t status, const char* what) {
    DI_CHECK(status == UCS_OK, "UCX: {} failed: {}", what, ucs_status_string(status));
}

struct SendOp {
    SpanHeader header;
    std::shared_ptr<const std::vector<std::byte>> blob;
    UcxTransport::SendDone done;
    std::atomic<int>* in_flight = nullptr;
};

struct RecvOp {
    SpanHeader header;
    std::vector<std::byte> blob;
    void* descriptor = nullptr;
};

}  // namespace

struct UcxTransport::Impl {
    ucp_context_h context = nullptr;
    bool detect_peer_failure = true;
    ucp_worker_h worker = nullptr;
    int event_fd = -1;
    OnSpan on_span;
    std::mutex mutex;
    struct Outgoing {
        std::string peer;
        SpanHeader header;
        std::shared_ptr<const std::vector<std::byte>> blob;
        SendDone done;
    };
    std::deque<Outgoing> queue;
    bool stop = false;
    // Thread only.
    std::map<std::string, ucp_ep_h> endpoints;
    std::vector<RecvOp*> arrived;  // rendezvous messages whose data is still to be fetched
    std::atomic<int> in_flight{0};

    void start_send(Outgoing o);
    ucp_ep_h endpoint(const std::string& peer, std::string& error);
    void receive_arrived();
    void drop_endpoint(ucp_ep_h ep);
};

static ucs_status_t on_message(void* arg, const void* header, size_t header_length, void* data, size_t length,
                               const ucp_am_recv_param_t* param) {
    auto* impl = static_cast<UcxTransport::Impl*>(arg);
    if (header_length != sizeof(SpanHeader)) return UCS_OK;  // not ours: dropped
    auto* op = new RecvOp;
    std::memcpy(&op->header, header, sizeof(SpanHeader));
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        op->blob.resize(length);
        op->descriptor = data;
        impl->arrived.push_back(op);  // fetched after progress returns (no UCX calls in here)
        return UCS_INPROGRESS;
    }
    const auto* bytes = static_cast<const std::byte*>(data);
    op->blob.assign(bytes, bytes + length);
    impl->on_span(op->header, std::move(op->blob));
    delete op;
    return UCS_OK;
}

UcxTransport::UcxTransport(OnSpan on_span, Options options) : impl_(std::make_unique<Impl>()) {
    impl_->on_span = std::move(on_span);
    impl_->detect_peer_failure = options.detect_peer_failure;
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "reading the configuration");
    // Active-message rendezvous over host memory (TCP, shared memory) is several times slower than
    // eager sends in UCX 1.13 (bench_pd_transfer): spans go eager unless the user says otherwise.
    if (std::getenv("UCX_RNDV_THRESH") == nullptr) ucp_config_modify(config, "RNDV_THRESH", "inf");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    ucs_status_t status = ucp_init(&params, config, &impl_->context);
    ucp_config_release(config);
    check(status, "init");
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // one thread drives the worker
    check(ucp_worker_create(impl_->context, &wp, &impl_->worker), "creating the worker");
    check(ucp_worker_get_efd(impl_->worker, &impl_->event_fd), "getting the event descriptor");
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = kSpanMessage;
    hp.cb = on_message;
    hp.arg = impl_.get();
    check(ucp_worker_set_am_recv_handler(impl_->worker, &hp), "setting the message handler");
    ucp_address_t* address = nullptr;
    size_t length = 0;
    check(ucp_worker_get_address(impl_->worker, &address, &length), "getting the worker address");
    address_.assign(reinterpret_cast<const char*>(address), length);
    ucp_worker_release_address(impl_->worker, address);
    thread_ = std::thread([this] { loop(); });
}

UcxTransport::~UcxTransport() {
    {
        std::lock_guard<std::mutex> lock(impl_->mutex);
        impl_->stop = true;
    }
    ucp_worker_signal(impl_->worker);
    thread_.join();
    for (RecvOp* op : impl_->arrived) delete op;
    ucp_worker_destroy(impl_->worker);
    ucp_cleanup(impl_->context);
}

void UcxTransport::send(const std::string& peer_address, SpanHeader header, std::shared_ptr<const std::vector<std::byte>> blob,
                        SendDone done) {
    {
        std::lock_guard<std::mutex> lock(impl_->mutex);
        if (!impl_->stop) {
            impl_->queue.push_back({peer_address, header, std::move(blob), std::move(done)});
            done = nullptr;
        }
    }
    if (done) return done("the transport is shutting down");
    ucp_worker_signal(impl_->worker);
}

void UcxTransport::loop() {
    Impl& m = *impl_;
    for (;;) {
        std::deque<Impl::Outgoing> sends;
        bool stop;
        {
            std::lock_guard<std::mutex> lock(m.mutex);
            sends.swap(m.queue);
            stop = m.stop;
        }
        if (stop) break;
        for (auto& o : sends) m.start_send(std::move(o));
        while (ucp_worker_progress(m.worker) != 0) {
        }
        if (!m.arrived.empty()) {
            m.receive_arrived();
            continue;
        }
        // Transfers in flight move only as fast as the worker is progressed (shared-memory and
        // copy transports raise no events): spin until they are done, then sleep on the event fd.
        if (m.in_flight > 0) {
            std::this_thread::yield();
            continue;
        }
        if (ucp_worker_arm(m.worker) == UCS_ERR_BUSY) continue;
        pollfd p{m.event_fd, POLLIN, 0};
        ::poll(&p, 1, kIdleWaitMs);
    }
    // Shutdown: endpoints go at once; their sends in flight fail.
    for (auto& [peer, ep] : m.endpoints) {
        ucp_request_param_t param{};
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = UCP_EP_CLOSE_FLAG_FORCE;
        void* req = ucp_ep_close_nbx(ep, &param);
        while (req != nullptr && !UCS_PTR_IS_ERR(req) && ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(m.worker);
        if (req != nullptr && !UCS_PTR_IS_ERR(req)) ucp_request_free(req);
    }
    m.endpoints.clear();
    std::lock_guard<std::mutex> lock(m.mutex);
    for (auto& o : m.queue)
        if (o.done) o.done("the transport is shutting down");
    m.queue.clear();
}

static void on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
    spdlog::warn("UCX: a peer connection failed: {}", ucs_status_string(status));
    static_cast<UcxTransport::Impl*>(arg)->drop_endpoint(ep);
}

void UcxTransport::Impl::drop_endpoint(ucp_ep_h ep) {
    for (auto it = endpoints.begin(); it != endpoints.end(); ++it)
        if (it->second == ep) {
            endpoints.erase(it);
            break;
        }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(ep, &param);
    if (req != nullptr && !UCS_PTR_IS_ERR(req)) ucp_request_free(req);  // completes in the background
}

ucp_ep_h UcxTransport::Impl::endpoint(const std::string& peer, std::string& error) {
    auto it = endpoints.find(peer);
    if (it != endpoints.end()) return it->second;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address = reinterpret_cast<const ucp_address_t*>(peer.data());
    if (detect_peer_failure) {  // a peer that dies fails its sends instead of hanging them
        params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        params.err_handler.cb = on_endpoint_error;
        params.err_handler.arg = this;
    }
    ucp_ep_h ep = nullptr;
    ucs_status_t status = ucp_ep_create(worker, &params, &ep);
    if (status != UCS_OK) {
        error = std::string("connecting to the peer: ") + ucs_status_string(status);
        return nullptr;
    }
    return endpoints[peer] = ep;
}

static void on_sent(void* request, ucs_status_t status, void* user_data) {
    auto* op = static_cast<SendOp*>(user_data);
    --*op->in_flight;
    if (op->done) op->done(status == UCS_OK ? std::string() : std::string("sending: ") + ucs_status_string(status));
    delete op;
    ucp_request_free(request);
}

void UcxTransport::Impl::start_send(Outgoing o) {
    std::string error;
    ucp_ep_h ep = endpoint(o.peer, error);
    if (ep == nullptr) {
        if (o.done) o.done(error);
        return;
    }
    auto* op = new SendOp{o.header, std::move(o.blob), std::move(o.done), &in_flight};
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = on_sent;
    param.user_data = op;
    ++in_flight;
    void* req = ucp_am_send_nbx(ep, kSpanMessage, &op->header, sizeof(SpanHeader), op->blob->data(), op->blob->size(), &param);
    if (req != nullptr && !UCS_PTR_IS_ERR(req)) return;  // on_sent runs when it completes
    --in_flight;
    ucs_status_t status = req == nullptr ? UCS_OK : UCS_PTR_STATUS(req);
    if (op->done) op->done(status == UCS_OK ? std::string() : std::string("sending: ") + ucs_status_string(status));
    delete op;
}

static void on_received(void* request, ucs_status_t status, size_t length, void* user_data) {
    auto* op = static_cast<RecvOp*>(user_data);
    auto* impl = static_cast<UcxTransport::Impl*>(op->descriptor);
    --impl->in_flight;
    if (status == UCS_OK) {
        op->blob.resize(length);
        impl->on_span(op->header, std::move(op->blob));
    }
    delete op;
    ucp_request_free(request);
}

void UcxTransport::Impl::receive_arrived() {
    std::vector<RecvOp*> ops;
    ops.swap(arrived);
    for (RecvOp* op : ops) {
        void* descriptor = std::exchange(op->descriptor, this);  // the callback finds the transport there
        ucp_request_param_t param{};
        param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        param.cb.recv_am = on_received;
        param.user_data = op;
        ++in_flight;
        void* req = ucp_am_recv_data_nbx(worker, descriptor, op->blob.data(), op->blob.size(), &param);
        if (req != nullptr && !UCS_PTR_IS_ERR(req)) continue;
        --in_flight;
        if (req == nullptr) on_span(op->header, std::move(op->blob));
        else spdlog::warn("UCX: receiving a span failed: {}", ucs_status_string(UCS_PTR_STATUS(req)));
        delete op;
    }
}

}  // namespace deepinfer::cluster::pd
