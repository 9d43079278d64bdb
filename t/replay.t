#!/usr/bin/perl
# ratelimit-replay: the same parser and messages as the directive, its
# input and output formats, and the same decisions as real nginx on the same
# request times.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use JSON::PP qw(decode_json);
use MIME::Base64 qw(encode_base64);
use POSIX ();
use Time::HiRes qw(sleep);
use RLTest;

my $replay = $ENV{RL_REPLAY} // "$FindBin::Bin/../build/ratelimit-replay";
ok(-x $replay, 'build/ratelimit-replay is built') or BAIL_OUT('no ratelimit-replay');

my $t = RLTest->new();
my $dir = $t->prefix;

sub run {
    my ($args, $input) = @_;
    RLTest::write_file("$dir/in.txt", $input // '');
    my $out = `$replay $args < $dir/in.txt 2>$dir/err.txt`;
    return ($? >> 8, $out, RLTest::read_file("$dir/err.txt"));
}

# the same parser: the same message as nginx -t, and exit status 2
for my $rule ('limit=0', 'limit=5 algorithm=magic', 'algorithm=fixed_window limit=5 burst=2', 'limit=5 period=fast') {
    my ($rc, $out, $err) = run("--rule '$rule'");
    is($rc, 2, "invalid rule '$rule': exit status 2");
    my ($nrc, $nout) = $t->test_conf("ratelimit_zone z 1m;\n" . RLTest::one_location("ratelimit zone=z $rule;"));
    my ($nginx_msg) = $nout =~ /"ratelimit" directive: (.*) in \S+:\d+/;
    my ($replay_msg) = $err =~ /^ratelimit-replay: --rule '\Q$rule\E': (.*)$/m;
    ok(defined $nginx_msg && defined $replay_msg && $nginx_msg eq $replay_msg, "'$rule': the message nginx -t gives")
        or diag("nginx: $nout\nreplay: $err");
}

# the plain trace: <unix_time_ms> <key> [cost]; bad lines reported, skipped
{
    my ($rc, $out, $err) = run("--rule 'limit=2 period=1s'", <<'EOF');
1000 alice
1001 alice
1002 alice 2
this is not a request
1050 bob
1100 alice
2000 alice
EOF
    is($rc, 0, 'trace: exit status 0');
    is($out, <<'EOF', 'trace: one line a request, then the summary');
ALLOW 1 0 alice
ALLOW 0 0 alice
DENY 0 998 alice
ALLOW 1 0 bob
DENY 0 400 alice
ALLOW 1 0 alice

requests 6
allowed 4
denied 2
delayed 0
distinct keys 2
bad lines 1
top denied keys:
  2 alice
EOF
    like($err, qr/^ratelimit-replay: stdin:4: skipped, not "<unix_time_ms> <key> \[cost \[charge \[duration_ms\]\]\]": this is not a request$/m,
         'trace: a bad line is reported with its number');
}

# a shaper delays; --summary; --json; --combine any
{
    my $trace = join '', map { "5000 k\n" } 1 .. 4;
    my ($rc, $out) = run("--rule 'algorithm=leaky_bucket limit=10 period=1s max_delay=200ms'", $trace);
    is((split /\n\n/, $out)[0], "ALLOW 2 0 k\nDELAY 2 100 k\nDELAY 2 200 k\nDENY 0 100 k", 'shaper: DELAY with its delay');
    ($rc, $out) = run("--summary --rule 'algorithm=leaky_bucket limit=10 period=1s max_delay=200ms'", $trace);
    like($out, qr/^requests 4\nallowed 1\ndenied 1\ndelayed 2\ndistinct keys 1\n/, '--summary only');
    ($rc, $out) = run("--json --rule 'limit=1 period=1s name=one'", "1000 a\n1001 a\n");
    is($out, qq({"time_ms":1000,"key":"a","decision":"ALLOW","remaining":0,"delay_ms":0,"reset_ms":1000,"rule":"one"}\n)
           . qq({"time_ms":1001,"key":"a","decision":"DENY","remaining":0,"retry_after_ms":999,"reset_ms":999,"rule":"one"}\n)
           . qq({"summary":{"requests":2,"allowed":1,"denied":1,"delayed":0,"distinct_keys":1,"bad_lines":0,)
           . qq("top_denied":[{"key":"a","denied":1}]}}\n), '--json');
    ($rc, $out) = run("--summary --combine any --rule 'limit=1 period=1h' --rule 'limit=2 period=1h name=b'",
                      "1 a\n2 a\n3 a\n");
    like($out, qr/^requests 3\nallowed 2\ndenied 1\n/, '--combine any');
}

# an nginx access log, combined format, keyed by address
{
    my $log = <<'EOF';
127.0.0.1 - - [22/Nov/2026:10:43:06 +0000] "GET / HTTP/1.1" 200 25 "-" "curl/7.88.1"
127.0.0.1 - - [22/Nov/2026:10:43:06 +0000] "GET / HTTP/1.1" 200 25 "-" "curl/7.88.1"
10.0.0.2 - - [22/Nov/2026:11:43:07 +0100] "GET /x HTTP/1.1" 404 0 "-" "curl/7.88.1"
garbage
EOF
    my ($rc, $out, $err) = run("--log-format combined --rule 'limit=1 period=2s'", $log);
    is((split /\n\n/, $out)[0], "ALLOW 0 0 127.0.0.1\nDENY 0 2000 127.0.0.1\nALLOW 0 0 10.0.0.2",
       'combined log: keyed by $remote_addr, $time_local with its offset');
    like($err, qr/stdin:4: skipped, not in the log format: garbage/, 'combined log: bad line reported');
}

# charge= and ban= from a trace's charge column: a login form where only
# failures (1) are charged, successes (0) given back.  sliding_log 3 a
# minute: ann's three failures at 3s, 4s, 5s fill her log (remaining 2, 2,
# 1, 0: each attempt holds a unit while it runs), her attempt at 6s is
# refused, which starts her ban of 10m: Retry-After 600000 ms rather than
# the 57000 ms her log would ask (its first failure leaves at 63s).  At 70s
# her log is empty, but the ban refuses her until 606s (536000 ms); at 606s
# she is admitted.  bob's six successes are all admitted, 2 remaining each.
my $login_rule = "--rule 'algorithm=sliding_log limit=3 period=1m charge=\$failed ban=10m name=login'";
{
    my ($rc, $out, $err) = run($login_rule, <<'EOF');
# <unix_time_ms> <key> [cost [charge [duration_ms]]]: 0 a success, 1 a failure
1000 ann - 0
1500 bob - 0
2000 ann - 0
2500 bob - 0
3000 ann - 1
3500 bob - 0
4000 ann - 1
4500 bob - 0
5000 ann - 1
5500 bob - 0
6000 ann - 0
6500 bob - 0
70000 ann - 0
606000 ann - 0
EOF
    is($rc, 0, 'login trace: exit status 0');
    is($out, <<'EOF', 'login trace: failures charged, a ban from the refusal on, its Retry-After, bob never refused');
ALLOW 2 0 ann
ALLOW 2 0 bob
ALLOW 2 0 ann
ALLOW 2 0 bob
ALLOW 2 0 ann
ALLOW 2 0 bob
ALLOW 1 0 ann
ALLOW 2 0 bob
ALLOW 0 0 ann
ALLOW 2 0 bob
DENY 0 600000 ann
ALLOW 2 0 bob
DENY 0 536000 ann
ALLOW 2 0 ann

requests 14
allowed 12
denied 2
delayed 0
distinct keys 2
bad lines 0
top denied keys:
  2 ann
rule login:
  units charged 3
  ended in debt 0
  bans started 1
EOF
    is($err, '', 'login trace: nothing on stderr');
}

# The same policy on an access log in the combined format (which has no
# $request_time: each request ends at once): --charge-status charges 1 for
# a 401 or 403, 0 for anything else.  The refusal at 10:00:05 bans
# 10.0.0.1 until 10:10:05: at 10:09:00 the Retry-After is 65000 ms.
{
    my $log = join '', map { my ($ip, $time, $st) = @$_;
        qq($ip - - [22/Nov/2026:$time +0000] "POST /login HTTP/1.1" $st 15 "-" "curl/7.88.1"\n) }
        ['10.0.0.1', '10:00:01', 200], ['10.0.0.1', '10:00:02', 401], ['10.0.0.2', '10:00:02', 200],
        ['10.0.0.1', '10:00:03', 401], ['10.0.0.1', '10:00:04', 403], ['10.0.0.1', '10:00:05', 200],
        ['10.0.0.1', '10:09:00', 200], ['10.0.0.1', '10:10:05', 200];
    my ($rc, $out, $err) = run("--log-format combined --charge-status 401,403 $login_rule", $log);
    is($out, <<'EOF', 'login log: --charge-status 401,403');
ALLOW 2 0 10.0.0.1
ALLOW 2 0 10.0.0.1
ALLOW 2 0 10.0.0.2
ALLOW 1 0 10.0.0.1
ALLOW 0 0 10.0.0.1
DENY 0 600000 10.0.0.1
DENY 0 65000 10.0.0.1
ALLOW 2 0 10.0.0.1

requests 8
allowed 6
denied 2
delayed 0
distinct keys 2
bad lines 0
top denied keys:
  2 10.0.0.1
rule login:
  units charged 3
  ended in debt 0
  bans started 1
EOF
    # the charge must come from somewhere the log has
    ($rc, $out, $err) = run("--log-format combined $login_rule", $log);
    is($rc, 2, 'login log: a charge= the log cannot give: exit status 2');
    like($err, qr/^ratelimit-replay: --rule '[^']+': charge=\$failed: the log format has no \$failed: give --charge-status or --charge$/m,
         'login log: ... and says what to give');
    ($rc, $out, $err) = run("--log-format '\$msec \$remote_addr' --charge-status 401 $login_rule", '');
    like($err, qr/^ratelimit-replay: --charge-status needs \$status in the log format$/m, '--charge-status needs $status');
    ($rc, $out, $err) = run("--charge-status 401 $login_rule", '');
    like($err, qr/apply to --log-format input/, '--charge-status: not for a trace');
    ($rc, $out, $err) = run("--log-format combined --charge-status 40 $login_rule", '');
    like($err, qr/invalid value "40" for --charge-status: expected statuses like 401,403 or 5xx/, '--charge-status: a bad list');
}

# Tokens: 1000 a 1000 s (a token a second), each request charged what it
# used when it ends, 5 s after it arrived.  The three reserve a token each
# (cost=1: the worst case declared, or each would reserve a third)
# (999 remaining each: a token came back each second) and are charged 400
# each at 6 s, 7 s and 8 s: the budget, full again at 6 s, is 600, then
# 202 (a second's token back), then 204 - 400 = 196 owed: the third ends in
# debt.  A request at 8 s (after that end, at the same instant) is refused
# until the debt and its own token are back: 197 s, so refused at 204.999
# s (1 ms more) and admitted at 205 s, with nothing remaining.  Charged:
# 3 x 400, and the last request's cost (no charge column: its cost).
{
    my ($rc, $out, $err) = run("--rule 'limit=1000 period=1000s cost=1 charge=\$tokens name=tokens'", <<'EOF');
1000 key - 400 5000
2000 key - 400 5000
3000 key - 400 5000
8000 key
204999 key
205000 key
EOF
    is($out, <<'EOF', 'tokens trace: the third charge puts the key in debt, Retry-After repays it');
ALLOW 999 0 key
ALLOW 999 0 key
ALLOW 999 0 key
DENY 0 197000 key
DENY 0 1 key
ALLOW 0 0 key

requests 6
allowed 4
denied 2
delayed 0
distinct keys 1
bad lines 0
top denied keys:
  2 key
rule tokens:
  units charged 1201
  ended in debt 1
EOF

    # from a log, the rule's own charge= ($upstream_http_x_tokens_used is
    # logged): "abc" charges the cost (1) and is told once on stderr
    ($rc, $out, $err) = run("--log-format '\$msec \$http_x_key \$upstream_http_x_tokens_used' --key '\$http_x_key'"
        . " --rule 'limit=1000 period=1000s charge=\$upstream_http_x_tokens_used name=tokens'",
        "1000.000 key 400\n1000.000 key 400\n1000.000 key abc\n1000.000 key 400\n1000.000 key -\n");
    # each request reserves a third of the limit (334) within what is left,
    # as nginx does: 666 shown, charged 400; 266, 400; all 200, 1; all 199,
    # 400
    is((split /\n\n/, $out)[0], "ALLOW 666 0 key\nALLOW 266 0 key\nALLOW 0 0 key\nALLOW 0 0 key\nDENY 0 202000 key",
       'tokens log: each charge spent before the next arrival at the same instant, each request reserving a '
       . 'third of the limit; 201 owed');
    like($out, qr/^rule tokens:\n  units charged 1201\n  ended in debt 1\n\z/m, 'tokens log: 400 + 400 + 1 + 400 charged');
    is($err, qq(ratelimit-replay: 1 charge was not a non-negative integer, and charged the request's cost, as in nginx; )
           . qq(the first, stdin:3: charge "abc" is not a non-negative integer, the request's cost (1) is charged\n),
       'tokens log: a bad charge told once (the refused request, with "-", is never charged)');
}

# Concurrency: 2 at once per key, waiting up to 3 s.  k's first two run
# 0-1 s; the three that come at 0.1, 0.2, 0.3 s wait, and are served in
# that order: two at 1 s (waited 900 and 800 ms) when the first two end,
# the third at 2 s (1700 ms).  At 2.1 s one of k's slots is free (ALLOW);
# the one at 2.2 s waits for the end at 3 s (800 ms), and the one at 2.3 s
# finds both slots held until 7.1 s and 8 s: refused when its 3 s are over,
# with no Retry-After.  j's request runs beside k's: 3 in flight at once,
# never more than 2 of a key.
my $slots_rule = "--rule 'algorithm=concurrency limit=2 max_wait=3s name=slots'";
my $slots_trace = <<'EOF';
0 k - - 1000
0 k - - 1000
100 k - - 1000
150 j - - 1000
200 k - - 1000
300 k - - 1000
2100 k - - 5000
2200 k - - 5000
2300 k - - 1000
EOF
{
    my ($rc, $out, $err) = run($slots_rule, $slots_trace);
    is($out, <<'EOF', 'concurrency trace: WAIT with the time waited, in the order of the input');
ALLOW 1 0 k
ALLOW 0 0 k
WAIT 0 900 k
ALLOW 1 0 j
WAIT 0 800 k
WAIT 0 1700 k
ALLOW 0 0 k
WAIT 0 800 k
DENY 0 0 k

requests 9
allowed 8
denied 1
delayed 0
distinct keys 2
bad lines 0
top denied keys:
  1 k
rule slots:
  peak in flight 3
  peak in flight of a key 2
  waited 5
  refused 1
EOF

    # from the JSON: each request's run; a key never has more than 2 at
    # once, and k's waiters start in the order they came
    ($rc, $out) = run("--json $slots_rule", $slots_trace);
    my @lines = map { decode_json($_) } split /\n/, $out;
    my $summary = pop @lines;
    my @dur = map { (split ' ')[4] } grep { /\S/ } split /\n/, $slots_trace;
    my (%events, @started);
    for my $i (0 .. $#lines) {
        my $r = $lines[$i];
        next if $r->{decision} eq 'DENY';
        my $start = $r->{time_ms} + ($r->{waited_ms} // 0);
        push @{ $events{ $r->{key} } }, [ $start, 1 ], [ $start + $dur[$i], -1 ];
        push @started, $start if $r->{key} eq 'k' && $r->{waited_ms};
    }
    my $peak = 0;
    for my $key (keys %events) {
        my $n = 0;
        for my $e (sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @{ $events{$key} }) {
            $n += $e->[1];
            $peak = $n if $n > $peak;
        }
    }
    is($peak, 2, 'concurrency JSON: at most 2 of a key in flight');
    is_deeply(\@started, [ sort { $a <=> $b } @started ], 'concurrency JSON: waiters served in the order they came');
    is_deeply([ @started ], [ 1000, 1000, 2000, 3000 ], 'concurrency JSON: ... when a slot freed');
    is($lines[8]{waited_ms}, 3000, 'concurrency JSON: the refused one waited its max_wait');
    is_deeply($summary->{summary}{rules}, [ { rule => 'slots', peak => 3, key_peak => 2, waited => 5, refused => 1 } ],
              'concurrency JSON: the rule\'s figures');
}

# A log with $request_time: its lines come in the order requests ended, the
# replay takes them in the order they started (the time logged less the
# request time), and prints them in the log's order.  The second line's
# request started first (999 s, for 2 s): the first, at 1000 s, finds the
# one slot held; the third, at 1001.1 s, finds it free again.
{
    my ($rc, $out, $err) = run("--log-format '\$msec \$request_time \$http_x_user \$status' --key '\$http_x_user'"
        . " --rule 'algorithm=concurrency limit=1 name=one'",
        "1000.500 0.500 ann 200\n1001.000 2.000 ann 200\n1001.200 0.100 ann 200\n");
    is((split /\n\n/, $out)[0], "DENY 0 0 ann\nALLOW 0 0 ann\nALLOW 0 0 ann", '$request_time: replayed in the order requests started');
    is($err, '', '$request_time: nothing on stderr');
    ($rc, $out, $err) = run("--log-format '\$msec \$http_x_user' --key '\$http_x_user' --rule 'algorithm=concurrency limit=1'",
        "1000.500 ann\n");
    like($err, qr/^ratelimit-replay: the log format has no \$request_time: each request ended at once/,
         'no $request_time: a concurrency rule is told it sees nothing in flight together');

    # a request longer than 5 minutes, and than every one before it, that
    # started before requests already replayed: decided when its line
    # comes, at its own time, and told
    ($rc, $out, $err) = run("--log-format '\$msec \$request_time \$http_x_user \$status' --key '\$http_x_user'"
        . " --rule 'limit=1 period=1h'", "1000.000 0.100 a 200\n1400.000 399.000 a 200\n1500.000 600.000 b 200\n");
    is((split /\n\n/, $out)[0], "ALLOW 0 0 a\nDENY 0 3598900 a\nALLOW 0 0 b", '$request_time: the longest first seen late');
    like($err, qr/^ratelimit-replay: 1 request started before requests already replayed, and was decided at its own time \(a log's lines are put in the order their requests started within the longest \$request_time seen, at least 1s, at most 5m\)$/,
         '$request_time: ... and told');

    # lines out of time order are decided when they come, and told
    ($rc, $out, $err) = run("--rule 'limit=1 period=1s'", "2000 a\n1000 a\n");
    like($err, qr/^ratelimit-replay: 1 request started before requests already replayed, and was decided at its own time/,
         'a trace out of time order is told');
}

# The examples of docs/operations.md: each command followed by its output
# there gives exactly that output.
{
    my @blocks = grep { ($_->{headings}[2] // '') eq 'Trying a policy: ratelimit-replay' }
        RLTest::doc_code('docs/operations.md');
    my $root = "$FindBin::Bin/..";
    my $ran = 0;
    for my $i (0 .. $#blocks - 1) {
        my ($cmd, $want) = @blocks[ $i, $i + 1 ];
        next unless $cmd->{lang} eq 'sh' && $want->{lang} eq '';
        (my $sh = $cmd->{text}) =~ s{\bbuild/ratelimit-replay\b}{$replay}g;
        my $got = `cd $root && $sh`;
        is($got, $want->{text}, "docs/operations.md:$cmd->{line}: the output shown");
        $ran++;
    }
    is($ran, 3, 'docs/operations.md: three examples with their output');
}

# the same decisions as nginx: requests through nginx, logged with $msec,
# then the log replayed with the same rules
{
    $t->start(<<'EOF');
ratelimit_zone z 1m;
log_format replay '$msec $http_x_user $status';
server {
    listen 127.0.0.1:%%PORT%%;
    location / {
        access_log %%PREFIX%%/replay.log replay;
        ratelimit zone=z key=$http_x_user limit=5 period=2s burst=3;
        ratelimit zone=z key=$http_x_user algorithm=sliding_window limit=8 period=3s buckets=3;
    }
}
EOF
    srand(7);
    my %status;
    for my $i (1 .. 150) {
        my $user = ('ann', 'bob', 'cy')[ int(rand(3)) ];
        $status{ $t->get('/index.html', { 'X-User' => $user })->{status} }++;
        sleep(rand(0.06));
    }
    $t->stop();
    ok($status{200} && $status{429}, "nginx admitted $status{200} and denied $status{429}");

    my $logged = $t->file('replay.log');
    my @want = map { (split ' ')[2] == 200 ? 'ALLOW' : 'DENY' } split /\n/, $logged;
    my ($rc, $out) = run("--log-format '\$msec \$http_x_user \$status' --key '\$http_x_user'"
        . " --rule 'limit=5 period=2s burst=3' --rule 'algorithm=sliding_window limit=8 period=3s buckets=3'",
        $logged);
    my @got = map { (split ' ')[0] } grep { /^(ALLOW|DENY|DELAY) / } split /\n/, $out;
    is(scalar @got, 150, 'replay: every request');
    is_deeply(\@got, \@want, 'replay: the decisions nginx made, request by request');
}

# charge= and ban= as nginx decides them: logins through nginx (a wrong
# password gets 401), logged with the time each ended and how long it took,
# replayed with --charge-status 401: the same decision for every request,
# bans included.  Each request follows the one before.
{
    my $t3 = RLTest->new();
    RLTest::write_file($t3->prefix . '/htpasswd', "alice:{PLAIN}right\n");
    $t3->write_conf(<<'EOF');
ratelimit_zone login 1m;
map $status $login_failed { 401 1; 403 1; default 0; }
log_format logins '$msec $request_time $http_x_client $status';
server {
    listen 127.0.0.1:%%PORT%%;
    location /login {
        access_log %%PREFIX%%/logins.log logins;
        ratelimit zone=login key=$http_x_client algorithm=sliding_log limit=3 period=1s
                  charge=$login_failed ban=700ms name=login;
        auth_basic "login";
        auth_basic_user_file %%PREFIX%%/htpasswd;
        alias %%PREFIX%%/html/index.html;
    }
}
EOF
    $t3->start();
    srand(11);
    my %status;
    for my $i (1 .. 120) {
        my $pw = rand() < 0.4 ? 'wrong' : 'right';
        my $r = $t3->get('/login', { 'X-Client' => ('ann', 'bob')[ int(rand(2)) ],
                                     Authorization => 'Basic ' . encode_base64("alice:$pw", '') });
        $status{ $r->{status} }++;
        sleep(rand(0.05));
    }
    $t3->stop();
    ok($status{200} && $status{401} && $status{429},
       "logins: nginx served $status{200}, failed $status{401}, refused $status{429}");

    my $logged = RLTest::read_file($t3->prefix . '/logins.log');
    my @want = map { (split ' ')[3] == 429 ? 'DENY' : 'ALLOW' } split /\n/, $logged;
    my ($rc, $out, $err) = run("--log-format '\$msec \$request_time \$http_x_client \$status' --key '\$http_x_client'"
        . " --charge-status 401,403 --rule 'algorithm=sliding_log limit=3 period=1s charge=\$login_failed ban=700ms name=login'",
        $logged);
    my @got = map { (split ' ')[0] } grep { /^(ALLOW|DENY) / } split /\n/, $out;
    is(scalar @got, 120, 'logins replayed: every request');
    is_deeply(\@got, \@want, 'logins replayed: the decisions nginx made, request by request');
    my ($charged) = $out =~ /^  units charged (\d+)$/m;
    my ($bans) = $out =~ /^  bans started (\d+)$/m;
    my $failed = () = $logged =~ / 401$/mg;
    is($charged, $failed, "logins replayed: the $failed failures charged");
    ok($bans > 0, "logins replayed: $bans bans started");
}

# Delays that tie: two shaping rules hold a request equally long; nginx and
# the replay of the same request times agree on every decision and on what
# the headers say (the binding rule: the first of the longest delays), as
# both go through the core's rl_decide.  Each user's requests follow one
# another; the users run at once.
{
    my $t2 = RLTest->new->start(<<'EOF');
ratelimit_zone z 1m;
log_format ties '$msec $request_time $http_x_user $ratelimit_status $ratelimit_rule $ratelimit_remaining $ratelimit_reset $ratelimit_retry_after';
server {
    listen 127.0.0.1:%%PORT%%;
    location / {
        access_log %%PREFIX%%/ties.log ties;
        ratelimit zone=z key=$http_x_user algorithm=leaky_bucket limit=10 period=1s max_delay=1s name=a;
        ratelimit zone=z key=$http_x_user limit=100 period=1s name=b;
        ratelimit zone=z key=$http_x_user algorithm=leaky_bucket limit=10 period=1s max_delay=50ms name=c;
    }
}
EOF
    RLTest::parallel(map {
        my $user = $_;
        sub {
            srand(length $user);
            for (1 .. 25) {
                $t2->get('/index.html', { 'X-User' => $user });
                sleep(rand(0.15));
            }
            return;
        };
    } 'ann', 'bob', 'cy');
    $t2->stop();

    # each request as nginx decided it, at the time nginx decided it
    my @nginx = sort { $a->[0] <=> $b->[0] } map {
        my ($msec, $took, $user, @rest) = split ' ';
        [ sprintf('%.0f', ($msec - $took) * 1000), $user, @rest ]
    } split /\n/, $t2->file('ties.log');
    is(scalar @nginx, 75, 'ties: 75 requests through nginx');
    my %seen;
    $seen{ $_->[2] }++ for @nginx;
    ok($seen{PASSED} && $seen{DELAYED} && $seen{REJECTED}, 'ties: passed, delayed and rejected ones');

    my $trace = join '', map { "$_->[0] $_->[1]\n" } @nginx;
    my ($rc, $out) = run("--json --rule 'algorithm=leaky_bucket limit=10 period=1s max_delay=1s name=a'"
        . " --rule 'limit=100 period=1s name=b'"
        . " --rule 'algorithm=leaky_bucket limit=10 period=1s max_delay=50ms name=c'", $trace);
    my @replay = grep { defined $_->{decision} } map { decode_json($_) } grep { /"decision"/ } split /\n/, $out;
    is(scalar @replay, 75, 'ties: every request replayed');

    my %status = (ALLOW => 'PASSED', DELAY => 'DELAYED', DENY => 'REJECTED');
    my ($same, $tied) = (0, 0);
    for my $i (0 .. $#nginx) {
        my ($ms, $user, $st, $rule, $remaining, $reset, $retry) = @{ $nginx[$i] };
        my $r = $replay[$i];
        my $want = join ' ', $status{ $r->{decision} }, $r->{rule}, $r->{remaining},
            int(($r->{reset_ms} + 999) / 1000),
            $r->{decision} eq 'DENY' ? (int(($r->{retry_after_ms} + 999) / 1000) || 1) : 0;
        my $got = "$st $rule $remaining $reset $retry";
        $same++ if $got eq $want;
        diag("request $i ($ms $user): nginx $got, replay $want") if $got ne $want;
        $tied++ if $st eq 'DELAYED' && $rule eq 'a';
    }
    is($same, 75, 'ties: every decision and header the same in nginx and the replay');
    ok($tied > 0, "ties: $tied delays tied between a and c, the first binding");
}

done_testing();
