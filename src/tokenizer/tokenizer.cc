#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path);
    DI_CHECK(in.good(), "cannot read {}", path);
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail("{} is not valid JSON ({})", path, e.what());
    }
}

void check_normalizer(const nlohmann::json& n) {
    if (n.is_null()) return;
    std::string type = n.value("type", "");
    DI_CHECK(type == "Sequence" && n.value("normalizers", nlohmann::json::array()).empty(),
             "tokenizer.json: normalizer '{}' is not supported", type);
}

void check_decoder(const nlohmann::json& d) {
    DI_CHECK(d.is_null() || d.value("type", "") == "ByteLevel", "tokenizer.json: decoder '{}' is not supported (ByteLevel)",
             d.is_null() ? "" : d.value("type", ""));
}

// HF's ByteLevel decoder: a token whose characters are all byte stand-ins decodes to those bytes,
// any other token (e.g. "<｜User｜>") to its own UTF-8.
std::string decoded_bytes(const std::string& token) {
    std::string out;
    size_t i = 0;
    while (i < token.size()) {
        int b = char_to_byte(next_code_point(token, i));
        if (b < 0) return token;
        out.push_back(static_cast<char>(b));
    }
    return out;
}

std::optional<std::string> special_token_text(const nlohmann::json& cfg, const char* key) {
    if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
    const auto& v = cfg[key];
    return v.is_string() ? v.get<std::string>() : v.value("content", "");
}

}  // namespace

Tokenizer::~Tokenizer() = default;

std::shared_ptr<Tokenizer> Tokenizer::from_dir(const std::string& dir) {
    namespace fs = std::filesystem;
    std::string config = (fs::path(dir) / "tokenizer_config.json").string();
    return from_files((fs::path(dir) / "tokenizer.json").string(), fs::exists(config) ? config : "");
}

std::shared_ptr<Tokenizer> Tokenizer::from_files(const std::string& tokenizer_json, const std::string& config_json) {
    nlohmann::json spec = read_json(tokenizer_json);
    std::shared_ptr<Tokenizer> t(new Tokenizer());
    check_normalizer(spec.value("normalizer", nlohmann::json()));
    check_decoder(spec.value("decoder", nlohmann::json()));
    t->bpe_ = std::make_unique<Bpe>(spec.at("model"));
    t->pre_ = std::make_unique<PreTokenizer>(spec.value("pre_tokenizer", nlohmann::json()));
    const auto& added = spec.value("added_tokens", nlohmann::json::array());
    t->added_raw_ = std::make_unique<AddedVocab>(added, false);
    t->added_normalized_ = std::make_unique<AddedVocab>(added, true);

    size_t n = t->bpe_->vocab_size();
    for (const auto& a : added) n = std::max(n, static_cast<size_t>(a.at("id").get<int32_t>()) + 1);
    t->bytes_.resize(n);
    t->special_.assign(n, 0);
    t->valid_.assign(n, 0);
    for (size_t id = 0; id < t->bpe_->vocab_size(); ++id) {
        const std::string& tok = t->bpe_->token(static_cast<int32_t>(id));
        if (tok.empty()) continue;
        t->bytes_[id] = decoded_bytes(tok);
        t->valid_[id] = 1;
    }
    for (const auto* vocab : {t->added_raw_.get(), t->added_normalized_.get()})
        for (const AddedToken& a : vocab->tokens()) {
            t->bytes_[a.id] = decoded_bytes(a.content);
            t->special_[a.id] = a.special;
            t->valid_[a.id] = 1;
        }
    if (!config_json.empty()) {
        nlohmann::json cfg = read_json(config_json);
        t->add_bos_ = cfg.value("add_bos_token", false);
        t->add_eos_ = cfg.value("add_eos_token", false);
        if (auto bos = special_token_text(cfg, "bos_token")) t->bos_id_ = t->token_to_id(*bos);
        if (auto eos = special_token_text(cfg, "eos_token")) t->eos_id_ = t->token_to_id(*eos);
        DI_CHECK(!t->add_bos_ || t->bos_id_, "{}: add_bos_token is set but bos_token is not a token", config_json);
        DI_CHECK(!t->add_eos_ || t->eos_id_, "{}: add_eos_token is set but eos_token is not a token", config_json);
    }
    return t;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    for (const auto* vocab : {added_raw_.get(), added_normalized_.get()})
        for (const AddedToken& a : vocab->tokens())
            if (a.content == token) return a.id;
    return bpe_->id_of(token);
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
    static const std::string kEmpty;
    return is_valid_id(id) ? bytes_[id] : kEmpty;
}

bool Tokenizer::is_valid_id(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < valid_.size() && valid_[id]; }
bool Tokenizer::is_special(int32_t id) const { return is_valid_id(id) && special_[id]; }

void Tokenizer::encode_normalized_part(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<std::string_view> pieces;
    size_t pos = 0;
    while (pos < text.size()) {
        AddedVocab::Match m = added_normalized_->find(text, pos);
        std::string_view plain = text.substr(pos, (m.id >= 0 ? m.begin : text.size()) - pos);
        if (!plain.empty()) {
            pre_->split(plain, pieces);
            for (std::string_view p : pieces) bpe_->encode_piece(p, out);
        }
        if (m.id < 0) break;
        out.push_back(m.id);
        pos = m.end;
    }
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
    size_t pos = 0;
    while (pos < text.size()) {
        AddedVocab::Match m = added_raw_->find(text, pos);
        encode_normalized_part(text.substr(pos, (m.id >= 0 ? m.begin : text.size()) - pos), out);
        if (m.id < 0) break;
        out.push_back(m.id);
        pos = m.end;
    }
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
    size_t bad = find_invalid_utf8(text);
    if (bad != std::string_view::npos)
        return Status::invalid_argument("text is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
    std::vector<int32_t> ids;
    if (add_special_tokens && add_bos_) ids.push_back(*bos_id_);
    encode_text(text, ids);
    if (add_special_tokens && add_eos_) ids.push_back(*eos_id_);
    return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
    std::string bytes;
    for (int32_t id : ids) {
        if (!is_valid_id(id) || (skip_special_tokens && special_[id])) continue;
        bytes += bytes_[id];
    }
    return utf8_lossy(bytes);
}

std::string IncrementalDecoder::push(int32_t id) {
    if (!tok_->is_valid_id(id) || (skip_special_ && tok_->is_special(id))) return {};
    pending_ += tok_->token_bytes(id);
    size_t tail = 0;
    std::string out = utf8_lossy(pending_, /*keep_incomplete_tail=*/true, &tail);
    pending_.erase(0, pending_.size() - tail);
    return out;
}

std::string IncrementalDecoder::flush() {
    std::string out = utf8_lossy(pending_);
    pending_.clear();
    return out;
}

}  // namespace deepinfer::tokenizer
