// A local zone's key states in a file (ratelimit_state.h says its format):
// written from the table a chunk at a time, each chunk under the zone's
// lock, and read back into a fresh table when nginx starts.
//
// The reader takes the file as hostile: it checks the whole file (its
// length, its versions, its checksum, every record within its end) before
// it changes anything, and what it then writes is what a process dying in
// the middle of a write could leave: any head, and any bytes in a block,
// which every algorithm reads safely (table.h, algorithms.h).  The
// checksum finds a file cut short or damaged; it is no signature (who can
// write the file can write a valid one), which is why nothing in the file
// is trusted beyond what a table can hold anyway.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "algorithms/algorithm.h"
#include "ratelimit_state.h"
#include "table/table.h"

namespace rl {

namespace {

const char kMagic[8] = {'R', 'L', 'S', 'T', 'A', 'T', 'E', '1'};
constexpr uint32_t kFormat = 1;
constexpr uint64_t kCellsEnd = ~uint64_t{0};

// A key whose state says it is back to full budget this far ahead holds
// something for requests in flight: concurrency's slots and queue, and an
// adaptive key (concurrency.cpp's horizon puts them 2^40 ms ahead), while
// no rate's state ever reaches half as far.  No request survives a
// restart: such a key is neither written nor restored.
constexpr int64_t kHeldAhead = 1ll << 39;

// A key's block in the file: at most this many words (512 KB).
constexpr uint64_t kBlobWordsMax = 0xffff;

constexpr size_t kHeaderWords = 7;
constexpr size_t kRuleWords = 2 + RL_NAME_MAX / 8;
static_assert(RL_NAME_MAX % 8 == 0, "a rule's name is whole words");
// The rules a file names at most (the header fits any chunk).
constexpr size_t kRulesMax = 512;
static_assert((kHeaderWords + kRulesMax * kRuleWords) * 8 < RL_STATE_CHUNK_MIN / 2, "a header fits a chunk");

uint64_t sum_word(uint64_t h, uint64_t w)
{
    h ^= w;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 29;
    return h;
}
constexpr uint64_t kSumSeed = 0x6e67782d726c7374ull;

bool held(int64_t t, int64_t now)
{
    return t > now && (uint64_t) t - (uint64_t) now > (uint64_t) kHeldAhead;
}

uint64_t word_at(const uint8_t *p)
{
    uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
}

// A key's third word: n, the debt's fraction and origin, its block's words.
uint64_t key_word(uint32_t n, Debt d, uint64_t blob_words)
{
    return (uint64_t) n | (uint64_t) (d.frac & 0xff) << 32 | (uint64_t) d.inherited << 40 | blob_words << 48;
}

}  // namespace

// The table's parts the file copies (a friend of Table).
struct StateAccess {
    static const Bucket *buckets(const Table &t) { return t.buckets(); }
    static const uint8_t *block(const Table &t, uint32_t handle) { return t.block(handle); }
    static uint64_t *cells(const Table &t) { return t.cells(); }
    static TableLayout &layout(Table &t) { return t.h_; }
};

namespace {

// The words a chunk is written as, and summed.
struct Words {
    uint8_t *p;
    size_t cap, len;
    uint64_t *sum;

    size_t room() const { return (cap - len) / 8; }
    void word(uint64_t w)
    {
        std::memcpy(p + len, &w, 8);
        len += 8;
        *sum = sum_word(*sum, w);
    }
    void bytes(const uint8_t *b, size_t words)
    {
        for (size_t i = 0; i < words; i++) {
            word(word_at(b + 8 * i));
        }
    }
};

void write_header(rl_state_write_t *w, const Table &t, Words &o)
{
    const TableLayout &h = t.layout();
    uint64_t magic;
    std::memcpy(&magic, kMagic, 8);
    o.word(magic);
    o.word((uint64_t) kFormat | (uint64_t) h.version << 32);
    o.word((uint64_t) w->now);
    o.word(h.ncells);
    o.bytes(h.secret, 2);
    o.word(w->nrules);
    for (uint32_t i = 0; i < w->nrules; i++) {
        const rl_state_rule_t &r = w->rules[i];
        o.word(r.identity);
        o.word(r.algorithm);
        char name[RL_NAME_MAX] = {};
        std::memcpy(name, r.name, RL_NAME_MAX - 1);
        o.bytes(reinterpret_cast<const uint8_t *>(name), RL_NAME_MAX / 8);
    }
}

// Keys from the cursor (bucket * 3 + slot), at most `buckets` buckets'.
void write_keys(rl_state_write_t *w, const Table &t, Words &o, uint64_t buckets)
{
    const Bucket *b = StateAccess::buckets(t);
    const uint64_t nslots = t.layout().nbuckets * 3;
    const uint64_t end = std::min(nslots, w->cursor + buckets * 3);
    for (; w->cursor < end; w->cursor++) {
        const Bucket &at = b[w->cursor / 3];
        const int i = (int) (w->cursor % 3);
        const int64_t until = at.t[i];
        if (at.tag[i] == 0 || until <= w->now || held(until, w->now)) {
            continue;
        }
        uint64_t words = 0;
        const uint8_t *blob = nullptr;
        if (has_block(at.meta, i)) {
            const uint32_t handle = at.n[i];
            const uint32_t pool = handle >> 24;
            if (pool >= t.layout().npools || (handle & (kBlocksMax - 1)) >= t.layout().pools[pool].blocks) {
                continue;  // a handle a dead process left: the key is lost
            }
            words = (t.layout().pools[pool].block_size - 8) / 8;
            blob = StateAccess::block(t, handle) + 8;
            if (words > kBlobWordsMax) {
                continue;
            }
        }
        if (o.room() < 3 + words + 1) {
            return;  // the rest in the next chunk
        }
        o.word(at.tag[i]);
        o.word((uint64_t) until);
        o.word(key_word(blob != nullptr ? 0 : at.n[i], debt_of(at.meta, i), words));
        if (blob != nullptr) {
            o.bytes(blob, words);
        }
        w->keys++;
    }
}

void write_cells(rl_state_write_t *w, const Table &t, Words &o, uint64_t buckets)
{
    const uint64_t n = t.layout().counts.sketch_until > w->now ? t.layout().ncells : 0;
    const uint64_t *c = StateAccess::cells(t);
    const uint64_t end = std::min(n, w->cursor + buckets * 3);
    for (; w->cursor < end && o.room() > 3; w->cursor++) {
        const uint64_t v = c[w->cursor];
        if ((int64_t) (v >> 8) > w->now) {  // still owing: until, above its 8 bits of fraction
            o.word(w->cursor);
            o.word(v);
            w->cells++;
        }
    }
    if (w->cursor >= n) {
        w->cursor = n;
    }
}

// A file checked whole: where its parts are.
struct Parsed {
    const uint8_t *file;
    size_t nw;        // its words
    uint64_t rules;   // the rules it names
    size_t keys_at;   // the word of its first key
    size_t cells_at;  // of its first cell
    uint64_t keys;    // its keys
    uint64_t ncells;  // the summary's cells of its table

    uint64_t word(size_t i) const { return word_at(file + 8 * i); }
};

// Checks the file whole before anything of it is used: its length, its
// versions, its checksum, and every record within its end.
bool parse(const Table &t, const uint8_t *file, size_t len, Parsed *f, char *err, size_t errlen)
{
    const size_t nw = len / 8;
    if (len % 8 != 0 || nw < kHeaderWords + 4) {
        std::snprintf(err, errlen, "truncated (%zu bytes)", len);
        return false;
    }
    if (std::memcmp(file, kMagic, 8) != 0) {
        std::snprintf(err, errlen, "not a state file");
        return false;
    }
    const uint64_t versions = f->word(1);
    if ((uint32_t) versions != kFormat || (uint32_t) (versions >> 32) != t.layout().version) {
        std::snprintf(err, errlen, "written by another version of the module (format %u, table %u; this one: %u, %u)",
                      (unsigned) (uint32_t) versions, (unsigned) (versions >> 32), (unsigned) kFormat,
                      (unsigned) t.layout().version);
        return false;
    }
    if (rl_state_checksum(file, len) != f->word(nw - 1)) {
        std::snprintf(err, errlen, "damaged or truncated (checksum)");
        return false;
    }
    if (t.layout().counts.keys != 0) {
        std::snprintf(err, errlen, "the zone is not empty");
        return false;
    }
    f->ncells = f->word(3);
    f->rules = f->word(6);
    const size_t body = nw - 2;  // the trailer: keys, checksum
    if (f->rules > kRulesMax || kHeaderWords + f->rules * kRuleWords > body) {
        std::snprintf(err, errlen, "damaged (%llu rules)", (unsigned long long) f->rules);
        return false;
    }
    size_t i = f->keys_at = kHeaderWords + f->rules * kRuleWords;
    for (;;) {
        if (i >= body || (f->word(i) != 0 && (body - i < 3 || (f->word(i + 2) >> 48) > body - i - 3))) {
            std::snprintf(err, errlen, "damaged (a key past the end)");
            return false;
        }
        if (f->word(i) == 0) {
            i++;
            break;
        }
        i += 3 + (f->word(i + 2) >> 48);
        f->keys++;
    }
    f->cells_at = i;
    for (;;) {
        if (i >= body || (f->word(i) != kCellsEnd && body - i < 2)) {
            std::snprintf(err, errlen, "damaged (a cell past the end)");
            return false;
        }
        if (f->word(i) == kCellsEnd) {
            i++;
            break;
        }
        i += 2;
    }
    if (i != body || f->word(body) != f->keys) {
        std::snprintf(err, errlen, "damaged (%llu keys counted, %llu said)", (unsigned long long) f->keys,
                      (unsigned long long) f->word(body));
        return false;
    }
    return true;
}

// The file's rules that no rule of the zone has the identity of, by name.
void report_gone(const Parsed &f, const rl_state_rule_t *rules, size_t nrules, rl_state_report_t *report)
{
    size_t len = 0;
    for (uint64_t r = 0; r < f.rules; r++) {
        const size_t at = kHeaderWords + r * kRuleWords;
        bool found = false;
        for (size_t k = 0; k < nrules && !found; k++) {
            found = rules[k].identity == f.word(at);
        }
        if (found) {
            continue;
        }
        report->rules_gone++;
        char name[RL_NAME_MAX];
        std::memcpy(name, f.file + 8 * (at + 2), RL_NAME_MAX);
        name[RL_NAME_MAX - 1] = '\0';
        const bool clean = rl_name_valid(name, std::strlen(name));
        const int n =
            std::snprintf(report->gone + len, sizeof(report->gone) - len, "%s%s", len ? ", " : "", clean ? name : "?");
        len = std::min(sizeof(report->gone) - 1, len + (n > 0 ? (size_t) n : 0));
    }
}

// What a restored key may owe: a file's times are moved `back` to now's
// clock (it was written that far ahead of now: the clock stepped back since,
// or it was written by hand), then owe no longer from now than the zone's
// rules can make a key owe (a rule relaxed since, a file made up).  The
// table does not know a key's rule: the longest of the zone's rules bounds
// every key, and a key's block is bounded by the rules whose blocks are
// of its size.
struct Bound {
    int64_t back = 0;
    int64_t longest = 0;  // any rule's longest wait or ban

    void of(const rl_state_rule_t *rules, size_t nrules)
    {
        for (size_t k = 0; k < nrules; k++) {
            const rl_rule_t *r = rules[k].rule;
            if (r != nullptr && !has(*r, kSlots)) {
                longest = std::max({longest, r->horizon_ms, r->ban_ms});
            }
        }
    }

    // a key's until (or a cell's) moved back and cut, counted in *cut if
    // it was; false if it owes nothing now
    bool until(int64_t &t, int64_t now, uint64_t *cut) const
    {
        t = t > INT64_MIN + back ? t - back : t;
        if (t <= now || held(t, now)) {
            return false;
        }
        if (t - now > longest) {
            t = now + longest;
            ++*cut;
        }
        return true;
    }

    // the rule whose algorithm bounds a block of the pool's: the one of
    // longest wait among those of its size, if they share an algorithm
    const rl_rule_t *block_rule(const Table &t, int pool, const rl_state_rule_t *rules, size_t nrules) const
    {
        const rl_rule_t *by = nullptr;
        for (size_t k = 0; k < nrules; k++) {
            const rl_rule_t *r = rules[k].rule;
            if (r == nullptr || blob_size(*r) == 0 || t.pool_for(blob_size(*r)) != pool) {
                continue;
            }
            if (by != nullptr && by->algorithm != r->algorithm) {
                return nullptr;  // two algorithms' blocks of one size: neither's way is sure
            }
            by = by == nullptr || r->horizon_ms > by->horizon_ms ? r : by;
        }
        return by;
    }
};

// A checked file's keys and cells into the table, with its secret.
void apply(Table &t, const Parsed &f, const rl_state_rule_t *rules, size_t nrules, int64_t now,
           rl_state_report_t *report)
{
    TableLayout &h = StateAccess::layout(t);
    std::memcpy(h.secret, f.file + 8 * 4, sizeof(h.secret));
    Bound bound;
    const int64_t written = (int64_t) f.word(2);
    bound.back = written > now ? written - now : 0;
    bound.of(rules, nrules);
    report->ahead = bound.back;
    for (size_t i = f.keys_at; f.word(i) != 0;) {
        const uint64_t tag = f.word(i);
        int64_t until = (int64_t) f.word(i + 1);
        const uint64_t k = f.word(i + 2);
        const uint64_t words = k >> 48;
        const Debt debt{(uint32_t) (k >> 32) & 0xff, ((k >> 40) & 1) != 0};
        const uint8_t *blob = f.file + 8 * (i + 3);
        i += 3 + words;
        if (!bound.until(until, now, &report->bounded)) {
            report->expired++;
            continue;
        }
        h.counts.restored_until = std::max(h.counts.restored_until, until);
        if (words == 0) {
            t.store(tag, rl_state_t{until, (uint32_t) k}, debt, now);
            report->restored++;
            continue;
        }
        const int pool = t.pool_for(words * 8);
        if (pool < 0 || t.layout().pools[pool].block_size - 8 != words * 8) {
            report->no_block++;
            continue;
        }
        State s = t.acquire(tag, pool, now);
        std::memcpy(s.blob, blob, words * 8);
        const rl_rule_t *by = bound.block_rule(t, pool, rules, nrules);
        if (by != nullptr && algorithm_of(*by).bound_block != nullptr) {
            s.head.t = until;
            algorithm_of(*by).bound_block(*by, s, now, bound.back);
        }
        t.set_t(tag, until, debt);
        report->restored++;
    }
    uint64_t *c = StateAccess::cells(t);
    for (size_t i = f.cells_at; f.word(i) != kCellsEnd; i += 2) {
        const uint64_t index = f.word(i);
        const uint64_t v = f.word(i + 1);
        int64_t until = (int64_t) (v >> 8);
        if (f.ncells != h.ncells || index >= h.ncells) {
            report->cells_dropped++;
            continue;
        }
        uint64_t cut = 0;
        if (!bound.until(until, now, &cut)) {
            continue;
        }
        c[index] = (uint64_t) until << 8 | (v & 0xff);  // its fraction as written
        h.counts.restored_until = std::max(h.counts.restored_until, until);
        h.counts.sketch_until = std::max(h.counts.sketch_until, until);
        report->cells++;
    }
}

}  // namespace

}  // namespace rl

using rl::StateAccess;
using rl::Table;

extern "C" {

void rl_state_write_begin(rl_state_write_t *w, const rl_state_rule_t *rules, size_t nrules, int64_t now)
{
    std::memset(w, 0, sizeof(*w));
    w->now = now;
    w->rules = rules;
    w->nrules = (uint32_t) std::min(nrules, rl::kRulesMax);
    w->sum = rl::kSumSeed;
}

int rl_state_write_next(rl_state_write_t *w, void *table, uint8_t *out, size_t cap, uint64_t buckets, size_t *len)
{
    *len = 0;
    if (cap < RL_STATE_CHUNK_MIN || w->phase > 3) {
        return 0;
    }
    Table::at(table)->recover();
    const Table &t = *Table::at(table);
    rl::Words o{out, cap & ~size_t{7}, 0, &w->sum};
    buckets = buckets ? buckets : 1;
    switch (w->phase) {
    case 0:
        rl::write_header(w, t, o);
        w->phase = 1;
        w->cursor = 0;
        // fall through
    case 1:
        rl::write_keys(w, t, o, buckets);
        if (w->cursor < t.layout().nbuckets * 3) {
            break;
        }
        o.word(0);  // no more keys
        w->phase = 2;
        w->cursor = 0;
        break;
    case 2: {
        const uint64_t n = t.layout().counts.sketch_until > w->now ? t.layout().ncells : 0;
        rl::write_cells(w, t, o, buckets);
        if (w->cursor < n) {
            break;
        }
        o.word(rl::kCellsEnd);
        w->phase = 3;
        break;
    }
    case 3:
        o.word(w->keys);
        {
            const uint64_t sum = w->sum;
            std::memcpy(out + o.len, &sum, 8);
            o.len += 8;
        }
        w->phase = 4;
        break;
    }
    *len = o.len;
    return w->phase <= 3;
}

uint64_t rl_state_checksum(const uint8_t *file, size_t len)
{
    uint64_t sum = rl::kSumSeed;
    for (size_t i = 0; i + 1 < len / 8; i++) {
        sum = rl::sum_word(sum, rl::word_at(file + 8 * i));
    }
    return sum;
}

int rl_state_restore(void *table, const uint8_t *file, size_t len, const rl_state_rule_t *rules, size_t nrules,
                     int64_t now, rl_state_report_t *report, char *err, size_t errlen)
{
    std::memset(report, 0, sizeof(*report));
    try {
        Table &t = *Table::at(table);
        rl::Parsed f{file, len / 8, 0, 0, 0, 0, 0};
        if (!rl::parse(t, file, len, &f, err, errlen)) {
            return RL_ERROR;
        }
        report->written = (int64_t) f.word(2);
        report->keys = f.keys;
        report->rules = (uint32_t) f.rules;
        rl::report_gone(f, rules, nrules, report);
        rl::apply(t, f, rules, nrules, now, report);
        return RL_OK;
    } catch (...) {
        std::snprintf(err, errlen, "internal error");
        return RL_ERROR;
    }
}

}  // extern "C"
