// Streaming tool-call parsing against the whole-text parser: random assistant turns (rendered by
// the chat encoding, so in the model's own format) fed in random pieces must add up to
// parse_completion() of the whole text, and each call must be announced as soon as its name has
// arrived, not at the end.
#include "tokenizer/tool_call_stream.h"

#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_encoding.h"

namespace deepinfer::tokenizer {
namespace {

using nlohmann::json;

std::string random_text(std::mt19937& rng, int max_len) {
    static const std::vector<std::string> atoms = {"a", "b", " ", "\n", "<", ">", "\"", "x=1", "｜", "é", "\n\n<", "\n\n<｜DSML｜", "{}", "</"};
    std::string s;
    int n = static_cast<int>(rng() % (max_len + 1));
    for (int i = 0; i < n; ++i) s += atoms[rng() % atoms.size()];
    return s;
}

json random_value(std::mt19937& rng) {
    switch (rng() % 4) {
        case 0: return random_text(rng, 6);
        case 1: return static_cast<int>(rng() % 1000) - 500;
        case 2: return json::array({static_cast<int>(rng() % 9), "s", true});
        default: return json{{"k", random_text(rng, 3)}};
    }
}

// An assistant turn as the model writes it: content, then tool calls in the DSML format.
std::string assistant_turn(const std::string& content, const std::vector<ToolCall>& calls) {
    ChatMessage m{"assistant", content};
    m.tool_calls = calls;
    std::string p = encode_chat({{"user", "q"}, m}, {}, {});
    const std::string start = "<｜Assistant｜></think>", end = "<｜end▁of▁sentence｜>";
    size_t from = p.find(start) + start.size();
    return p.substr(from, p.rfind(end) - from);
}

TEST(ToolCallStream, PiecesAddUpToTheWholeTextParse) {
    std::mt19937 rng(1234);
    for (int round = 0; round < 400; ++round) {
        std::vector<ToolCall> calls;
        int num_calls = static_cast<int>(rng() % 4);
        for (int c = 0; c < num_calls; ++c) {
            json args = json::object();
            for (int a = 0, n = static_cast<int>(rng() % 4); a < n; ++a) args["p" + std::to_string(a)] = random_value(rng);
            std::string name = "fn_";
            name += std::to_string(rng() % 100);
            calls.push_back({"", name, args.dump()});
        }
        std::string content = random_text(rng, 12);
        std::string text = assistant_turn(content, calls);
        ParsedCompletion whole = parse_completion(text, false);

        ToolCallStream stream;
        std::string got_content;
        std::vector<std::string> names, args;
        auto take = [&](const ToolCallStream::Delta& d) {
            got_content += d.content;
            for (const auto& c : d.calls) {
                if (c.opens) names.push_back(c.name), args.emplace_back();
                if (c.closes) args.at(static_cast<size_t>(c.index)) = c.arguments;
            }
        };
        for (size_t pos = 0; pos < text.size();) {
            size_t len = 1 + rng() % 9;
            take(stream.push(text.substr(pos, len)));
            pos += len;
        }
        take(stream.flush());
        ASSERT_EQ(got_content, whole.content) << text;
        ASSERT_EQ(names.size(), whole.tool_calls.size()) << text;
        for (size_t c = 0; c < names.size(); ++c) {
            EXPECT_EQ(names[c], whole.tool_calls[c].name);
            EXPECT_EQ(json::parse(args[c]), json::parse(whole.tool_calls[c].arguments)) << text;
        }
    }
}

TEST(ToolCallStream, EachCallIsAnnouncedWhenItsNameArrives) {
    std::vector<ToolCall> calls = {{"", "first", R"({"a": 1})"}, {"", "second", R"({"b": "two"})"}};
    std::string text = assistant_turn("Let me check.", calls);
    ToolCallStream stream;
    int opened = 0;
    std::string content;
    const std::string header_end = "\">";
    size_t search = text.find("invoke name=");
    std::vector<size_t> name_ends;
    while (search != std::string::npos) {
        name_ends.push_back(text.find(header_end, search) + header_end.size());
        search = text.find("invoke name=", name_ends.back());
    }
    ASSERT_EQ(name_ends.size(), 2u);
    for (size_t i = 0; i < text.size(); ++i) {
        auto d = stream.push(text.substr(i, 1));
        content += d.content;
        for (const auto& c : d.calls) opened += c.opens;
        for (size_t k = 0; k < name_ends.size(); ++k)
            if (i + 1 == name_ends[k]) {
                EXPECT_EQ(opened, static_cast<int>(k) + 1) << "call " << k << " not announced when its name arrived";
            }
        if (i + 1 == text.find("\n\n<")) {
            EXPECT_EQ(content, "Let me check.") << "content held back";
        }
    }
}

TEST(ToolCallStream, TextThatOnlyLooksLikeAnOpenerIsContent) {
    ToolCallStream stream;
    std::string content;
    for (std::string piece : {"a\n\n", "<｜DS", "ML｜tool", "s>b"}) content += stream.push(piece).content;
    content += stream.flush().content;
    EXPECT_EQ(content, "a\n\n<｜DSML｜tools>b");
    ToolCallStream cut;  // an opener without any call (cut off): content, as the whole-text parser has it
    std::string text = "x" + tool_calls_opener() + "\n<｜DSML｜inv";
    std::string got = cut.push(text).content;
    got += cut.flush().content;
    EXPECT_EQ(got, parse_completion(text, false).content);
}

}  // namespace
}  // namespace deepinfer::tokenizer
