// Structured output through `deepinfer serve` on the bundled model, which writes junk when left
// alone: the masks alone must make every complete output valid. Each output is judged by a
// reference independent of the grammar engine: python-jsonschema for JSON (the JSON-Schema-Test-Suite
// and MaskBench schemas of tests/data that compile), PCRE2 for regexes, a recursive-descent
// recognizer, nlohmann's JSON parser and PCRE2 for the EBNF grammars, and python-jsonschema for the
// arguments of forced tool calls. Outputs cut off by max_tokens cannot be complete; they must say
// "length", and enough outputs must complete for the test to mean something.
#include <gtest/gtest.h>
#include <httplib.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "tests/grammar/arithmetic.h"
#include "tests/grammar/validate_json.h"
#include "tests/server/serve_process.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using OrderedJson = nlohmann::ordered_json;
namespace fs = std::filesystem;

class StructuredServe : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        server_ = new test::ServeProcess({"--model", test::nano_model_dir(), "--max-sequences", "64", "--max-running", "64",
                                          "--max-batch-tokens", "512", "--cache-memory", "512MiB"});
        ASSERT_GT(server_->port(), 0) << "the server did not start";
    }
    static void TearDownTestSuite() { delete server_; }

    // Posts every body (several clients at once, so the engine batches them); replies in order.
    static std::vector<std::pair<int, json>> post_all(const std::string& path, const std::vector<std::string>& bodies) {
        std::vector<std::pair<int, json>> replies(bodies.size());
        std::atomic<size_t> next{0};
        std::vector<std::thread> clients;
        for (int c = 0; c < 24; ++c)
            clients.emplace_back([&] {
                httplib::Client client("127.0.0.1", server_->port());
                client.set_read_timeout(600, 0);
                for (size_t i; (i = next++) < bodies.size();) {
                    auto r = client.Post(path.c_str(), bodies[i], "application/json");
                    if (r) replies[i] = {r->status, json::parse(r->body, nullptr, false)};
                }
            });
        for (auto& t : clients) t.join();
        return replies;
    }
    static test::ServeProcess* server_;
};
test::ServeProcess* StructuredServe::server_ = nullptr;

// The schemas of the test data, as written (key order kept).
std::vector<OrderedJson> data_schemas() {
    std::vector<OrderedJson> out;
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(std::string(DEEPINFER_TEST_DATA) + "/json-schema-test-suite/draft2020-12"))
        if (e.path().extension() == ".json" && e.path().filename() != "format.json") files.push_back(e.path());
    for (const auto& e : fs::directory_iterator(std::string(DEEPINFER_TEST_DATA) + "/maskbench"))
        if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
        OrderedJson doc = OrderedJson::parse(std::ifstream(f));
        if (doc.is_array())
            for (const auto& c : doc) out.push_back(c["schema"]);
        else
            out.push_back(doc["schema"]);
    }
    return out;
}

struct Tally {
    int complete = 0, cut = 0, refused = 0;
};

// Counts a completion reply; returns its text when it finished with "stop".
std::optional<std::string> completed_text(const std::pair<int, json>& reply, Tally& tally) {
    if (reply.first == 400) {
        ++tally.refused;
        return std::nullopt;
    }
    EXPECT_EQ(reply.first, 200) << reply.second.dump().substr(0, 300);
    if (reply.first != 200) return std::nullopt;
    const json& choice = reply.second["choices"][0];
    std::string finish = choice["finish_reason"];
    EXPECT_TRUE(finish == "stop" || finish == "length") << finish;
    if (finish != "stop") {
        ++tally.cut;
        return std::nullopt;
    }
    ++tally.complete;
    return choice.contains("text") ? choice["text"].get<std::string>() : choice["message"]["content"].get<std::string>();
}

TEST_F(StructuredServe, JsonSchemaOutputsValidate) {
    std::vector<OrderedJson> schemas = data_schemas();
    std::vector<std::string> bodies;
    for (size_t i = 0; i < schemas.size(); ++i) {
        OrderedJson body = {{"prompt", "JSON:"}, {"max_tokens", 320}, {"temperature", 1.0}, {"seed", i}};
        if (i % 2) body["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "t"}, {"strict", true}, {"schema", schemas[i]}}}};
        else body["guided_json"] = schemas[i];
        bodies.push_back(body.dump());
    }
    auto replies = post_all("/v1/completions", bodies);
    Tally tally;
    json cases = json::array();
    for (size_t i = 0; i < replies.size(); ++i)
        if (auto text = completed_text(replies[i], tally)) cases.push_back({{"schema", json::parse(schemas[i].dump())}, {"text", *text}});
    std::vector<std::string> verdicts = test::validate_with_python(cases);
    ASSERT_EQ(verdicts.size(), cases.size()) << "python3 with jsonschema is needed (scripts/setup.sh installs it)";
    int checked = 0;
    for (size_t k = 0; k < verdicts.size(); ++k) {
        if (!verdicts[k].empty() && verdicts[k][0] == '?') continue;  // the validator cannot judge this schema
        ++checked;
        EXPECT_EQ(verdicts[k], "") << cases[k]["schema"].dump().substr(0, 300) << "\n" << cases[k]["text"].get<std::string>().substr(0, 300);
    }
    std::cout << schemas.size() << " schemas: " << tally.refused << " refused (400), " << tally.complete << " complete ("
              << checked << " validated), " << tally.cut << " cut off by max_tokens\n";
    EXPECT_GT(tally.refused, 100);  // unsupported keywords are refused, not ignored
    EXPECT_GT(checked, 200);
}

// PCRE2: the whole output must match.
bool pcre2_matches_whole(const std::string& pattern, const std::string& text) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_ALT_BSUX | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &error, &offset, nullptr);
    if (code == nullptr) return false;
    pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
    bool ok = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, data, nullptr) >= 0;
    pcre2_match_data_free(data);
    pcre2_code_free(code);
    return ok;
}

TEST_F(StructuredServe, RegexOutputsMatch) {
    const std::vector<std::string> patterns = {
        R"([a-z]{2,8}@[a-z]{2,8}\.(com|org|net))", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))", R"(\(\d{3}\) \d{3}-\d{4})",
        R"([A-Z][a-z]{1,10}( [A-Z][a-z]{1,10}){0,2})", R"(-?(0|[1-9]\d{0,5})(\.\d{1,4})?)", R"((yes|no|maybe)!?)",
        R"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})", R"(def [a-z_]{1,12}\([a-z, ]{0,20}\):)",
        R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))", R"(é{1,3}[^a-z\s]{2}\w?)",
        R"(<([a-z]{1,5})>[^<>]{0,20}</[a-z]{1,5}>)", R"(#[0-9A-Fa-f]{6})"};
    std::vector<std::string> bodies;
    for (size_t i = 0; i < patterns.size() * 4; ++i)
        bodies.push_back(json{{"prompt", "x = "}, {"max_tokens", 120}, {"seed", i}, {"guided_regex", patterns[i % patterns.size()]}}.dump());
    auto replies = post_all("/v1/completions", bodies);
    Tally tally;
    for (size_t i = 0; i < replies.size(); ++i)
        if (auto text = completed_text(replies[i], tally))
            EXPECT_TRUE(pcre2_matches_whole(patterns[i % patterns.size()], *text)) << patterns[i % patterns.size()] << "\n" << *text;
    EXPECT_EQ(tally.refused, 0);
    EXPECT_GE(tally.complete, static_cast<int>(bodies.size()) * 3 / 4);
}

const char* kJsonGrammar = R"ebnf(
root   ::= object
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" (member ("," member){0,3})? "}"
member ::= string ":" value
array  ::= "[" (value ("," value){0,3})? "]"
string ::= "\"" ([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})){0,12} "\""
number ::= "-"? ("0" | [1-9] [0-9]{0,5}) ("." [0-9]{1,4})? ([eE] [-+]? [0-9]{1,2})?
)ebnf";

const char* kSqlGrammar = R"ebnf(
root    ::= "SELECT " columns " FROM " name where? order? limit? ";"
columns ::= "*" | name (", " name){0,3}
where   ::= " WHERE " cond ((" AND " | " OR ") cond){0,2}
cond    ::= name " " ("=" | "<" | ">" | "<=" | ">=" | "<>") " " (num | "'" [a-z ]{0,12} "'")
order   ::= " ORDER BY " name (" ASC" | " DESC")?
limit   ::= " LIMIT " [1-9] [0-9]{0,3}
num     ::= [0-9]{1,6}
name    ::= [a-z_] [a-z0-9_]{0,11}
)ebnf";

// The SQL subset is regular: the same language as a PCRE2 pattern.
const char* kSqlPattern =
    R"(SELECT (\*|[a-z_][a-z0-9_]{0,11}(, [a-z_][a-z0-9_]{0,11}){0,3}) FROM [a-z_][a-z0-9_]{0,11})"
    R"(( WHERE %C%(( AND | OR )%C%){0,2})?( ORDER BY [a-z_][a-z0-9_]{0,11}( ASC| DESC)?)?( LIMIT [1-9][0-9]{0,3})?;)";

TEST_F(StructuredServe, EbnfOutputsParse) {
    std::string cond = R"([a-z_][a-z0-9_]{0,11} (=|<|>|<=|>=|<>) ([0-9]{1,6}|'[a-z ]{0,12}'))";
    std::string sql = kSqlPattern;
    for (size_t at; (at = sql.find("%C%")) != std::string::npos;) sql.replace(at, 3, cond);
    struct Case {
        const char* grammar;
        std::function<bool(const std::string&)> accepts;
    };
    std::vector<Case> cases = {{test::kBoundedArithmetic, [](const std::string& t) { return test::Arithmetic::accepts(t, 4, 3, 3); }},
                               {kJsonGrammar, [](const std::string& t) { return json::accept(t) && json::parse(t).is_object(); }},
                               {kSqlGrammar, [&](const std::string& t) { return pcre2_matches_whole(sql, t); }}};
    std::vector<std::string> bodies;
    for (size_t i = 0; i < 3 * 24; ++i)
        bodies.push_back(json{{"prompt", "query: "}, {"max_tokens", 200}, {"seed", i}, {"guided_grammar", cases[i % 3].grammar}}.dump());
    auto replies = post_all("/v1/completions", bodies);
    std::vector<Tally> tally(3);
    for (size_t i = 0; i < replies.size(); ++i)
        if (auto text = completed_text(replies[i], tally[i % 3])) EXPECT_TRUE(cases[i % 3].accepts(*text)) << cases[i % 3].grammar << "\n" << *text;
    for (size_t g = 0; g < tally.size(); ++g) {
        EXPECT_EQ(tally[g].refused, 0);
        EXPECT_GE(tally[g].complete, 12) << cases[g].grammar << "\n" << tally[g].cut << " cut off by max_tokens";
    }
}

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
   "parameters": {"type": "object", "properties": {
     "city": {"type": "string", "maxLength": 24},
     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
     "days": {"type": "integer", "minimum": 1, "maximum": 7, "multipleOf": 1},
     "hourly": {"type": "boolean"}},
    "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
     "query": {"type": "string", "minLength": 1, "maxLength": 40},
     "filters": {"type": "array", "items": {"type": "string", "enum": ["news", "code", "docs"]}, "maxItems": 2},
     "site": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": "^[a-z]{1,8}\\.(com|org)$"}]}},
    "required": ["query", "filters", "site"]}}}])";

// Forced tool calls: tool_choice "required" (any tool, one or more calls) and a named function
// (one call, parallel_tool_calls false), streamed and not. Every call the reply reports must name
// a tool and carry arguments that satisfy the tool's parameters schema.
TEST_F(StructuredServe, ForcedToolCallsSatisfyTheirSchemas) {
    json tools = json::parse(kTools);
    std::map<std::string, json> schemas;
    for (const auto& t : tools) schemas[t["function"]["name"]] = t["function"]["parameters"];
    std::vector<std::string> bodies;
    std::vector<bool> named;
    for (int i = 0; i < 24; ++i) {
        json body = {{"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}}, {"tools", tools},
                     {"max_tokens", 1200}, {"seed", i}, {"stream", i % 3 == 0}};
        named.push_back(i % 2 == 1);
        if (named.back()) body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "search"}}}}, body["parallel_tool_calls"] = false;
        else body["tool_choice"] = "required";
        bodies.push_back(body.dump());
    }
    std::vector<std::pair<int, std::string>> raw(bodies.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < bodies.size(); ++i)
        clients.emplace_back([&, i] {
            httplib::Client client("127.0.0.1", server_->port());
            client.set_read_timeout(600, 0);
            if (auto r = client.Post("/v1/chat/completions", bodies[i], "application/json")) raw[i] = {r->status, r->body};
        });
    for (auto& t : clients) t.join();
    json cases = json::array();
    int complete = 0;
    for (size_t i = 0; i < raw.size(); ++i) {
        ASSERT_EQ(raw[i].first, 200) << raw[i].second.substr(0, 300);
        json message = {{"tool_calls", json::array()}};
        std::string finish;
        if (i % 3 == 0) {  // streamed: the calls assembled from their deltas
            for (const json& chunk : test::sse_events(raw[i].second)) {
                const json& c = chunk["choices"][0];
                if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
                for (const json& d : c["delta"].value("tool_calls", json::array())) {
                    size_t k = d["index"];
                    if (k >= message["tool_calls"].size()) message["tool_calls"].push_back({{"function", {{"name", ""}, {"arguments", ""}}}});
                    if (d["function"].contains("name")) message["tool_calls"][k]["function"]["name"] = d["function"]["name"];
                    message["tool_calls"][k]["function"]["arguments"] = d["function"]["arguments"];  // complete in the closing delta
                }
            }
        } else {
            json reply = json::parse(raw[i].second);
            finish = reply["choices"][0]["finish_reason"];
            message = reply["choices"][0]["message"];
        }
        ASSERT_TRUE(finish == "tool_calls" || finish == "length") << finish;
        if (finish == "length") continue;
        ++complete;
        ASSERT_GE(message["tool_calls"].size(), 1u) << message.dump();
        if (named[i]) ASSERT_EQ(message["tool_calls"].size(), 1u);
        for (const json& call : message["tool_calls"]) {
            std::string name = call["function"]["name"];
            ASSERT_TRUE(schemas.count(name)) << name;
            if (named[i]) EXPECT_EQ(name, "search");
            cases.push_back({{"schema", schemas[name]}, {"text", call["function"]["arguments"]}});
        }
    }
    std::vector<std::string> verdicts = test::validate_with_python(cases);
    ASSERT_EQ(verdicts.size(), cases.size()) << "python3 with jsonschema is needed";
    for (size_t k = 0; k < verdicts.size(); ++k) EXPECT_EQ(verdicts[k], "") << cases[k].dump();
    EXPECT_GE(complete, 16);
}

// A bad schema, regex or grammar, and structured-output fields that cannot go together, are 400s
// naming the field and the problem.
TEST_F(StructuredServe, BadRequestsAreRefusedNamingTheProblem) {
    struct Case {
        std::string path, body, param, message;
    };
    std::string chat = R"("messages": [{"role": "user", "content": "hi"}])";
    std::vector<Case> cases = {
        {"/v1/completions", R"({"prompt": "x", "guided_json": {"type": "array", "contains": {"type": "integer"}}})", "guided_json",
         "unsupported JSON Schema keyword 'contains'"},
        {"/v1/completions", R"({"prompt": "x", "guided_regex": "(a|b"})", "guided_regex", "bad regex at offset"},
        {"/v1/completions", R"({"prompt": "x", "guided_grammar": "root ::= 'a' (b"})", "guided_grammar", "EBNF syntax error at 1:"},
        {"/v1/completions", R"({"prompt": "x", "guided_json": false})", "guided_json", "accepts no output"},
        {"/v1/completions", R"({"prompt": "x", "guided_choice": []})", "guided_choice", "non-empty array"},
        {"/v1/completions", R"({"prompt": "x", "guided_regex": "a", "guided_choice": ["b"]})", "guided_choice", "only one of"},
        {"/v1/chat/completions", "{" + chat + R"(, "response_format": {"type": "yaml"}})", "response_format", "json_schema"},
        {"/v1/chat/completions", "{" + chat + R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})",
         "response_format.json_schema.name", "name"},
        {"/v1/chat/completions", "{" + chat + R"(, "response_format": {"type": "json_object", "extra": 1}})",
         "response_format.extra", "extra"},
        {"/v1/chat/completions", "{" + chat + R"(, "tool_choice": "required"})", "tool_choice", "no tools"},
        {"/v1/chat/completions", "{" + chat + R"(, "tools": )" + kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}}})",
         "tool_choice", "'nope'"},
        {"/v1/chat/completions", "{" + chat + R"(, "tools": )" + kTools + R"(, "tool_choice": "required", "guided_regex": "a"})",
         "tool_choice", "together with guided_regex"},
        {"/v1/chat/completions", "{" + chat + R"(, "guided_decoding_backend": "xgrammar"})", "guided_decoding_backend", "unknown"},
    };
    for (const Case& c : cases) {
        auto r = post_all(c.path, {c.body})[0];
        ASSERT_EQ(r.first, 400) << c.body << "\n" << r.second.dump();
        EXPECT_EQ(r.second["error"]["param"], c.param) << r.second.dump();
        EXPECT_NE(r.second["error"]["message"].get<std::string>().find(c.message), std::string::npos) << r.second.dump();
    }
}

TEST_F(StructuredServe, JsonObjectModeGivesAnObject) {
    std::vector<std::string> bodies;
    for (int i = 0; i < 8; ++i)
        bodies.push_back(json{{"messages", {{{"role", "user"}, {"content", "Reply in JSON."}}}}, {"max_tokens", 300}, {"seed", i},
                              {"response_format", {{"type", "json_object"}}}}.dump());
    Tally tally;
    for (const auto& reply : post_all("/v1/chat/completions", bodies))
        if (auto text = completed_text(reply, tally)) EXPECT_TRUE(json::accept(*text) && json::parse(*text).is_object()) << *text;
    EXPECT_GE(tally.complete, 4);
}

}  // namespace
}  // namespace deepinfer
