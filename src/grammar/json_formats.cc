#include "grammar/json_formats.h"

#include <fmt/format.h>

#include <string>

#include "grammar/encoding.h"
#include "grammar/pda.h"
#include "grammar/regex.h"

namespace deepinfer::grammar {

namespace {

const std::string kDate =
    R"((?:\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8]))|)"
    R"((?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29))";
const std::string kFraction = R"((?:\.\d+)?)";
const std::string kOffset = R"((?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d))";
const std::string kTimeNoLeap = R"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d)" + kFraction + kOffset;
const std::string kOctet = R"((?:25[0-5]|2[0-4]\d|1\d\d|[1-9]\d|\d))";
const std::string kIpv4 = kOctet + R"(\.)" + kOctet + R"(\.)" + kOctet + R"(\.)" + kOctet;
const std::string kH16 = "[0-9A-Fa-f]{1,4}";

std::string ipv6() {
    std::string ls32 = "(?:" + kH16 + ":" + kH16 + "|" + kIpv4 + ")";
    auto groups = [&](int n) { return n == 0 ? std::string() : "(?:" + kH16 + ":){" + std::to_string(n) + "}"; };
    auto head = [&](int max_groups) {  // [ *max( h16 ":" ) h16 ]
        return "(?:" + (max_groups > 0 ? "(?:" + kH16 + ":){0," + std::to_string(max_groups) + "}" : std::string()) + kH16 + ")?";
    };
    // Appended piece by piece (RFC 3986's nine forms, by where "::" stands).
    std::string alts = "(?:" + groups(6) + ls32;
    alts.append("|::").append(groups(5)).append(ls32);
    for (int k = 0; k <= 4; ++k) alts.append("|").append(head(k)).append("::").append(groups(4 - k)).append(ls32);
    alts.append("|").append(head(5)).append("::").append(kH16);
    alts.append("|").append(head(6)).append("::)");
    return alts;
}

std::string uri() {
    const std::string pct = "%[0-9A-Fa-f]{2}";
    const std::string unreserved_sub = R"(A-Za-z0-9\-._~!$&'()*+,;=)";
    const std::string pchar = "(?:[" + unreserved_sub + ":@]|" + pct + ")";
    const std::string userinfo = "(?:[" + unreserved_sub + ":]|" + pct + ")*";
    const std::string reg_name = "(?:[" + unreserved_sub + "]|" + pct + ")*";
    const std::string ip_literal = R"(\[(?:)" + ipv6() + R"(|v[0-9A-Fa-f]+\.[)" + unreserved_sub + ":]+)\\]";
    const std::string authority = "(?:" + userinfo + "@)?(?:" + ip_literal + "|" + reg_name + R"()(?::\d*)?)";
    const std::string segment = pchar + "*", segment_nz = pchar + "+";
    const std::string hier = "(?://" + authority + "(?:/" + segment + ")*|/(?:" + segment_nz + "(?:/" + segment + ")*)?|" +
                             segment_nz + "(?:/" + segment + ")*|)";
    const std::string query = "(?:" + pchar + "|[/?])*";
    return "[A-Za-z][A-Za-z0-9+.\\-]*:" + hier + R"((?:\?)" + query + ")?(?:#" + query + ")?";
}

std::string email() {
    const std::string atext = R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~\-])";
    const std::string dot_atom = atext + "+(?:\\." + atext + "+)*";
    const std::string quoted = R"("(?:[\x20\x21\x23-\x5B\x5D-\x7E]|\\[\x20-\x7E])*")";
    const std::string label = "[A-Za-z0-9](?:[A-Za-z0-9\\-]*[A-Za-z0-9])?";
    const std::string domain = label + "(?:\\." + label + ")*|\\[" + kIpv4 + "\\]|\\[IPv6:" + ipv6() + "\\]";
    return "(?:" + dot_atom + "|" + quoted + ")@(?:" + domain + ")";
}

ExprId from_regex(Grammar& g, const std::string& pattern) {
    return lower_regex(g, parse_regex(pattern), CharEncoding::kJsonMinimal, RegexMatch::kWhole);
}

// Second 60 is valid only when the time is 23:59 in UTC, i.e. local time minus the offset. A
// finite but large language: one branch per local hour and minute, each with its two offsets.
ExprId leap_second_time(Grammar& g) {
    ExprId fraction = from_regex(g, kFraction);
    std::vector<ExprId> hours;
    for (int h = 0; h < 24; ++h) {
        std::vector<ExprId> minutes;
        for (int m = 0; m < 60; ++m) {
            int local = h * 60 + m;
            int plus = (local - (23 * 60 + 59) + 1440) % 1440, minus = (23 * 60 + 59 - local + 1440) % 1440;
            std::vector<ExprId> offsets{g.literal(fmt::format("+{:02}:{:02}", plus / 60, plus % 60)),
                                        g.literal(fmt::format("-{:02}:{:02}", minus / 60, minus % 60))};
            if (plus == 0) offsets.push_back(g.bytes([] { ByteSet z = ByteSet::of('Z'); z.add('z'); return z; }()));
            minutes.push_back(g.seq({g.literal(fmt::format("{:02}:60", m)), fraction, g.alt(offsets)}));
        }
        hours.push_back(g.seq({g.literal(fmt::format("{:02}:", h)), g.alt(minutes)}));
    }
    return g.alt(hours);
}

ExprId full_time(Grammar& g) { return g.alt({from_regex(g, kTimeNoLeap), leap_second_time(g)}); }

}  // namespace

bool is_standard_format(std::string_view format) {
    static constexpr std::string_view kStandard[] = {
        "date-time", "date",          "time", "duration",     "email",         "idn-email", "hostname",
        "idn-hostname", "ipv4",       "ipv6", "uri",          "uri-reference", "iri",       "iri-reference",
        "uuid",      "uri-template", "json-pointer", "relative-json-pointer", "regex"};
    for (std::string_view s : kStandard)
        if (s == format) return true;
    return false;
}

std::optional<ExprId> format_grammar(Grammar& g, std::string_view format) {
    if (format == "date") return from_regex(g, kDate);
    if (format == "time") return full_time(g);
    if (format == "date-time") {
        ByteSet t = ByteSet::of('T');
        t.add('t');
        return g.seq({from_regex(g, kDate), g.bytes(t), full_time(g)});
    }
    if (format == "ipv4") return from_regex(g, kIpv4);
    if (format == "ipv6") return from_regex(g, ipv6());
    if (format == "uuid") return from_regex(g, "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}");
    if (format == "email") return from_regex(g, email());
    if (format == "uri") return from_regex(g, uri());
    return std::nullopt;
}

std::shared_ptr<const Dfa> FormatCache::get(const std::string& format) {
    {
        std::lock_guard lock(mutex_);
        auto it = dfas_.find(format);
        if (it != dfas_.end()) return it->second;
    }
    Grammar g;
    auto expr = format_grammar(g, format);
    auto dfa = expr ? std::make_shared<const Dfa>(dfa_minimize(regular_dfa(g, *expr))) : nullptr;
    std::lock_guard lock(mutex_);
    return dfas_.emplace(format, dfa).first->second;
}

}  // namespace deepinfer::grammar
