// gbench_shim.cc - the project's only C++ file: the C API of gbench.h over
// Google Benchmark 1.7.1 (IREE's pattern). Benchmarks are lambdas calling a C
// callback; two reporter wrappers give reports exact, stable names and, for
// interleaved runs registered one repetition at a time, renumber the rows as
// repetitions of one benchmark. Uses only the 1.7.1 API. No exception leaves
// this file: every entry point that can throw turns it into a status.
#include "meas_gbench.h"

#include <benchmark/benchmark.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

struct mha_gbench_state {
    benchmark::State *st;
};

extern "C" int mha_gbench_keep_running(mha_gbench_state *s) {
    return s->st->KeepRunning() ? 1 : 0;
}

extern "C" int64_t mha_gbench_iterations(const mha_gbench_state *s) {
    return (int64_t)s->st->iterations();
}

extern "C" void mha_gbench_set_iteration_time(mha_gbench_state *s, double seconds) {
    s->st->SetIterationTime(seconds);
}

extern "C" void mha_gbench_skip_with_error(mha_gbench_state *s, const char *message) {
    s->st->SkipWithError(message ? message : "error");
}

extern "C" void mha_gbench_counter(mha_gbench_state *s, const char *name, double value,
                                   mha_gbench_counter_kind kind) {
    benchmark::Counter::Flags f = benchmark::Counter::kDefaults;
    switch (kind) {
    case MHA_GBENCH_RATE:
        f = benchmark::Counter::kIsRate;
        break;
    case MHA_GBENCH_PER_ITER_RATE:
        f = benchmark::Counter::kIsIterationInvariantRate;
        break;
    case MHA_GBENCH_PER_ITER_AVG:
        f = benchmark::Counter::kAvgIterations;
        break;
    default:
        break;
    }
    s->st->counters[name] = benchmark::Counter(value, f);
}

extern "C" void mha_gbench_set_bytes_processed(mha_gbench_state *s, int64_t bytes) {
    s->st->SetBytesProcessed(bytes);
}

extern "C" void mha_gbench_set_label(mha_gbench_state *s, const char *label) {
    s->st->SetLabel(label ? label : "");
}

namespace {

// What the reporters need to know about a registered name.
struct name_info {
    int report_as_repetitions = 0;
};

std::map<std::string, name_info> &registered() {
    static std::map<std::string, name_info> m;
    return m;
}

// The reported name: function name and arguments only. Google Benchmark
// appends /min_time:, /repeats:, /iterations: and /real_time for per-benchmark
// settings; those are settings, not identity, so the names stay exactly
// `name/arg:v/...` whatever the flags (compare matches rows by name).
void strip_name(benchmark::BenchmarkReporter::Run &r) {
    r.run_name.min_time.clear();
    r.run_name.min_warmup_time.clear();
    r.run_name.iterations.clear();
    r.run_name.repetitions.clear();
    r.run_name.time_type.clear();
    r.run_name.threads.clear();
}

// Rewrites a batch of rows the same way for each reporter; each reporter owns
// one, and both see the same sequence of batches, so they agree.
class run_fixer {
  public:
    std::vector<benchmark::BenchmarkReporter::Run>
    fix(const std::vector<benchmark::BenchmarkReporter::Run> &in) {
        std::vector<benchmark::BenchmarkReporter::Run> out(in);
        for (auto &r : out) {
            strip_name(r);
            // A "threads" counter is the benchmark's own thread count (OpenMP
            // inside one benchmark thread): it replaces Google Benchmark's
            // "threads" field instead of writing the JSON key twice.
            auto t = r.counters.find("threads");
            if (t != r.counters.end()) {
                r.threads = (int64_t)t->second.value;
                r.counters.erase(t);
            }
            const std::string name = r.run_name.str();
            auto it = registered().find(name);
            if (it == registered().end() || it->second.report_as_repetitions <= 0) continue;
            if (r.run_type != benchmark::BenchmarkReporter::Run::RT_Iteration) continue;
            auto fam = family_.find(name);
            if (fam == family_.end())
                fam = family_.emplace(name, std::make_pair(r.family_index, (int64_t)0)).first;
            r.family_index = fam->second.first;
            r.per_family_instance_index = 0;
            r.repetition_index = fam->second.second++;
            r.repetitions = it->second.report_as_repetitions;
        }
        return out;
    }

  private:
    std::map<std::string, std::pair<int64_t, int64_t>> family_; // name -> (family, next rep)
};

// Google Benchmark's JSON file reporter, fed the fixed rows.
class json_file_reporter : public benchmark::JSONReporter {
  public:
    void ReportRuns(const std::vector<Run> &reports) override {
        benchmark::JSONReporter::ReportRuns(fixer_.fix(reports));
    }

  private:
    run_fixer fixer_;
};

// Google Benchmark's JSON writes a non-finite double as a bare NaN, Infinity
// or -Infinity, which is not JSON: each such token (outside strings) becomes
// null.
std::string json_nonfinite_null(const std::string &in) {
    std::string out;
    out.reserve(in.size());
    static const char *const words[] = {"-Infinity", "Infinity", "NaN", "-nan", "nan", "-inf",
                                        "inf"};
    bool str = false;
    for (size_t i = 0; i < in.size();) {
        const char c = in[i];
        if (str) {
            out += c;
            if (c == '\\' && i + 1 < in.size()) out += in[++i];
            else if (c == '"') str = false;
            i++;
            continue;
        }
        if (c == '"') str = true;
        size_t wl = 0;
        const bool boundary = i == 0 || !std::isalnum((unsigned char)in[i - 1]);
        for (const char *w : words) {
            const size_t l = std::strlen(w);
            if (boundary && !wl && in.compare(i, l, w) == 0 &&
                (i + l == in.size() || !std::isalnum((unsigned char)in[i + l])))
                wl = l;
        }
        if (wl) {
            out += "null";
            i += wl;
            continue;
        }
        out += c;
        i++;
    }
    return out;
}

// One row as Google Benchmark's own JSON reporter writes it (the same
// fields, names and formatting as its --benchmark_out file), non-finite
// numbers as null: the text the C side stores (mha_gbench_result.json).
class row_json {
  public:
    row_json() {
        rep_.SetOutputStream(&os_);
        rep_.SetErrorStream(&std::cerr);
    }
    std::string of(const benchmark::BenchmarkReporter::Run &r) {
        os_.str("");
        os_.clear();
        rep_.ReportRuns(std::vector<benchmark::BenchmarkReporter::Run>{r});
        std::string t = os_.str();
        const size_t b = t.find('{'); // after the ",\n" between reports
        return json_nonfinite_null(b == std::string::npos ? t : t.substr(b));
    }

  private:
    std::ostringstream os_;
    benchmark::JSONReporter rep_;
};

// The display side: forwards fixed rows to an inner reporter (console, or the
// --benchmark_format one) when there is one, and to the C callback.
class display_reporter : public benchmark::BenchmarkReporter {
  public:
    display_reporter(benchmark::BenchmarkReporter *inner, mha_gbench_report_fn fn, void *user)
        : inner_(inner), fn_(fn), user_(user) {}

    bool ReportContext(const Context &context) override {
        return inner_ ? inner_->ReportContext(context) : true;
    }

    void ReportRuns(const std::vector<Run> &reports) override {
        const std::vector<Run> runs = fixer_.fix(reports);
        if (inner_) inner_->ReportRuns(runs);
        if (!fn_) return;
        for (const Run &r : runs) {
            const std::string name = r.run_name.str();
            std::vector<const char *> names;
            std::vector<double> values;
            for (const auto &c : r.counters) {
                names.push_back(c.first.c_str());
                values.push_back(c.second.value);
            }
            // Per-iteration seconds (GetAdjusted* are in the run's time unit).
            const double unit = 1.0 / benchmark::GetTimeUnitMultiplier(r.time_unit);
            mha_gbench_result res;
            std::memset(&res, 0, sizeof res);
            res.name = name.c_str();
            res.aggregate = r.run_type == Run::RT_Aggregate;
            res.aggregate_name = r.aggregate_name.c_str();
            res.error = r.error_occurred;
            res.error_message = r.error_message.c_str();
            res.iterations = (int64_t)r.iterations;
            res.repetition_index = r.repetition_index;
            res.repetitions = r.repetitions;
            res.real_time = r.GetAdjustedRealTime() * unit;
            res.cpu_time = r.GetAdjustedCPUTime() * unit;
            res.ncounters = (int)names.size();
            res.counter_names = names.data();
            res.counter_values = values.data();
            const std::string json = json_.of(r);
            res.json = json.c_str();
            fn_(&res, user_);
        }
    }

    void Finalize() override {
        if (inner_) inner_->Finalize();
    }

  private:
    benchmark::BenchmarkReporter *inner_;
    mha_gbench_report_fn fn_;
    void *user_;
    run_fixer fixer_;
    row_json json_;
};

bool has_flag(int argc, char **argv, const char *prefix) {
    const size_t n = std::strlen(prefix);
    for (int i = 1; i < argc; i++)
        if (std::strncmp(argv[i], prefix, n) == 0) return true;
    return false;
}

} // namespace

extern "C" double mha_gbench_result_counter(const mha_gbench_result *r, const char *name,
                                            double fallback) {
    for (int i = 0; i < r->ncounters; i++)
        if (std::strcmp(r->counter_names[i], name) == 0) return r->counter_values[i];
    return fallback;
}

static int register_one(const mha_gbench_def *def) {
    if (!def || !def->name || !def->run || def->nargs < 0 || def->nargs > MHA_GBENCH_MAX_ARGS)
        return -1;
    const mha_gbench_fn fn = def->run;
    void *const user = def->user;
    benchmark::internal::Benchmark *b =
        benchmark::RegisterBenchmark(def->name, [fn, user](benchmark::State &st) {
            mha_gbench_state s{&st};
            fn(&s, user);
        });
    if (!b) return -1;
    std::string full = def->name;
    if (def->nargs > 0) {
        std::vector<int64_t> args(def->args, def->args + def->nargs);
        std::vector<std::string> names;
        for (int i = 0; i < def->nargs; i++) {
            const char *an = def->arg_names[i] ? def->arg_names[i] : "";
            names.emplace_back(an);
            full += "/" + std::string(an) + (*an ? ":" : "") + std::to_string(def->args[i]);
        }
        b->Args(args)->ArgNames(names);
    }
    if (def->manual_time)
        b->UseManualTime();
    else if (def->real_time)
        b->UseRealTime();
    if (def->min_time > 0) b->MinTime(def->min_time);
    if (def->repetitions > 0) b->Repetitions(def->repetitions);
    if (def->iterations > 0) b->Iterations((benchmark::IterationCount)def->iterations);
    // Per-repetition rows always (compare needs them); aggregates besides.
    b->ReportAggregatesOnly(false);
    name_info &info = registered()[full];
    if (def->report_as_repetitions > 0) info.report_as_repetitions = def->report_as_repetitions;
    return 0;
}

extern "C" int mha_gbench_register(const mha_gbench_def *def) {
    try {
        return register_one(def);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "mhabench: cannot register a benchmark: %s\n", e.what());
    } catch (...) {
        std::fprintf(stderr, "mhabench: cannot register a benchmark (unknown exception)\n");
    }
    return -1;
}

extern "C" void mha_gbench_add_context(const char *key, const char *value) {
    try {
        benchmark::AddCustomContext(key ? key : "", value ? value : "");
    } catch (...) {
        std::fprintf(stderr, "mhabench: cannot add the context key '%s'\n", key ? key : "");
    }
}

extern "C" void mha_gbench_clear(void) {
    benchmark::ClearRegisteredBenchmarks();
    registered().clear();
}

namespace {

int run_benchmarks(int argc, char **argv, const char *json_out, mha_gbench_report_fn report,
                   void *user) {
    // Our flags go last so they win over the pass-through ones.
    std::vector<std::string> store;
    store.emplace_back(argc > 0 && argv[0] ? argv[0] : "mhabench");
    for (int i = 1; i < argc; i++) store.emplace_back(argv[i]);
    if (json_out) {
        store.emplace_back(std::string("--benchmark_out=") + json_out);
        store.emplace_back("--benchmark_out_format=json");
    }
    std::vector<char *> args;
    for (auto &s : store) args.push_back(&s[0]);
    args.push_back(nullptr);
    int n = (int)store.size();
    const bool explicit_format = has_flag(n, args.data(), "--benchmark_format");
    benchmark::Initialize(&n, args.data());
    if (n > 1) {
        for (int i = 1; i < n; i++)
            std::fprintf(stderr, "mhabench: unrecognised Google Benchmark flag '%s'\n", args[i]);
        return 2;
    }
    // Not owned: Google Benchmark returns one static reporter to every caller.
    benchmark::BenchmarkReporter *inner =
        (!report || explicit_format) ? benchmark::CreateDefaultDisplayReporter() : nullptr;
    display_reporter display(inner, report, user);
    size_t ran;
    if (json_out) {
        json_file_reporter file;
        ran = benchmark::RunSpecifiedBenchmarks(&display, &file);
    } else {
        ran = benchmark::RunSpecifiedBenchmarks(&display);
    }
    // No benchmark::Shutdown() here: in 1.7.1 it deletes the custom context
    // without clearing the pointer, so a second run in this process (the
    // sweep's follow-up passes) would read freed memory. The process's exit
    // frees it.
    return ran == 0 ? MHA_GBENCH_NO_MATCH : 0;
}

} // namespace

// No C++ exception may cross into C: Google Benchmark throws on some flag
// values it accepts (std::length_error for --benchmark_repetitions=-1), and
// the library can throw std::bad_alloc. They become status 2 and a message.
extern "C" int mha_gbench_run(int argc, char **argv, const char *json_out,
                              mha_gbench_report_fn report, void *user) {
    try {
        return run_benchmarks(argc, argv, json_out, report, user);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "mhabench: Google Benchmark failed: %s\n", e.what());
    } catch (...) {
        std::fprintf(stderr, "mhabench: Google Benchmark failed (unknown exception)\n");
    }
    return 2;
}

// The context a result file opens with, as Google Benchmark's JSON reporter
// writes it (its keys and the custom ones added so far), driven directly:
// the C side writes the whole file itself (harness/fmt_rows.c).
extern "C" char *mha_gbench_context_json(void) {
    try {
        // Initialize sets the executable name the context reports.
        std::string prog = "mhabench";
        char *argv[] = {&prog[0], nullptr};
        int argc = 1;
        benchmark::Initialize(&argc, argv);
        std::ostringstream os;
        benchmark::JSONReporter rep;
        rep.SetOutputStream(&os);
        rep.SetErrorStream(&std::cerr);
        if (!rep.ReportContext(benchmark::BenchmarkReporter::Context())) return nullptr;
        rep.Finalize(); // closes the (empty) benchmarks list and the object
        const std::string t = json_nonfinite_null(os.str());
        char *out = (char *)std::malloc(t.size() + 1);
        if (out) std::memcpy(out, t.c_str(), t.size() + 1);
        return out;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "mhabench: Google Benchmark failed: %s\n", e.what());
    } catch (...) {
        std::fprintf(stderr, "mhabench: Google Benchmark failed (unknown exception)\n");
    }
    return nullptr;
}
