#include "grammar/rule_graph.h"

#include <algorithm>

namespace deepinfer::grammar {

namespace {

std::vector<int32_t> referenced_rules(const Grammar& g, ExprId body, std::vector<uint32_t>& mark, uint32_t generation) {
    std::vector<int32_t> out;
    std::vector<ExprId> todo{body};
    while (!todo.empty()) {
        ExprId e = todo.back();
        todo.pop_back();
        if (mark[e] == generation) continue;
        mark[e] = generation;
        const ExprNode& n = g.node(e);
        if (n.kind == ExprKind::kRule) out.push_back(n.arg);
        else if (n.kind == ExprKind::kRepeat) todo.push_back(n.arg);
        else if (n.kind == ExprKind::kSeq || n.kind == ExprKind::kAlt)
            for (ExprId c : g.children(n)) todo.push_back(c);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

// Tarjan's strongly connected components, iterative so deep rule chains cannot overflow the stack.
std::vector<uint8_t> find_recursive(const std::vector<std::vector<int32_t>>& refs) {
    int32_t n = static_cast<int32_t>(refs.size());
    std::vector<int32_t> index(n, -1), low(n, 0), stack;
    std::vector<uint8_t> on_stack(n, 0), recursive(n, 0);
    int32_t counter = 0;
    struct Frame { int32_t v; size_t edge; };
    for (int32_t root = 0; root < n; ++root) {
        if (index[root] >= 0) continue;
        std::vector<Frame> frames{{root, 0}};
        index[root] = low[root] = counter++;
        stack.push_back(root);
        on_stack[root] = 1;
        while (!frames.empty()) {
            Frame& f = frames.back();
            if (f.edge < refs[f.v].size()) {
                int32_t w = refs[f.v][f.edge++];
                if (w == f.v) recursive[w] = 1;
                if (index[w] < 0) {
                    index[w] = low[w] = counter++;
                    stack.push_back(w);
                    on_stack[w] = 1;
                    frames.push_back({w, 0});
                } else if (on_stack[w]) {
                    low[f.v] = std::min(low[f.v], index[w]);
                }
                continue;
            }
            int32_t v = f.v;
            frames.pop_back();
            if (!frames.empty()) low[frames.back().v] = std::min(low[frames.back().v], low[v]);
            if (low[v] != index[v]) continue;
            std::vector<int32_t> component;
            int32_t w;
            do {
                w = stack.back();
                stack.pop_back();
                on_stack[w] = 0;
                component.push_back(w);
            } while (w != v);
            if (component.size() > 1)
                for (int32_t r : component) recursive[r] = 1;
        }
    }
    return recursive;
}

}  // namespace

RuleGraph analyze_rules(const Grammar& grammar) {
    RuleGraph graph;
    std::vector<uint32_t> mark(grammar.num_nodes(), 0);
    for (int32_t r = 0; r < grammar.num_rules(); ++r) {
        ExprId body = grammar.rule(r).body;
        graph.references.push_back(body < 0 ? std::vector<int32_t>{}
                                            : referenced_rules(grammar, body, mark, static_cast<uint32_t>(r + 1)));
    }
    graph.recursive = find_recursive(graph.references);
    return graph;
}

}  // namespace deepinfer::grammar
