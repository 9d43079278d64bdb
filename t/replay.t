#!/usr/bin/perl
# ratelimit-replay: the same parser and messages as the directive, its
# input and output formats, and the same decisions as real nginx on the same
# request times.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use JSON::PP;
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
    like($err, qr/^ratelimit-replay: stdin:4: skipped, not "<unix_time_ms> <key> \[cost\]": this is not a request$/m,
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
    my @replay = grep { defined $_->{decision} } map { JSON::PP::decode_json($_) } grep { /"decision"/ } split /\n/, $out;
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
