#!/usr/bin/perl
# Limits that depend on the response, through nginx: charge= spends what
# the response says when the request ends (failed logins only, the tokens
# an upstream reports), into debt if need be; ban= keeps a refused key out.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest;

my $t = RLTest->new();
$t->put_file('htpasswd', "alice:{PLAIN}right\n");
$t->put_file('html/big', 'x' x 2_000_000);
$t->start(<<'EOF');
keepalive_requests 100000000;
ratelimit_zone login 1m;
ratelimit_zone ai 1m;
ratelimit_zone misc 1m;
map $status $login_failed { 401 1; 403 1; default 0; }
log_format charged '$uri $status $ratelimit_charged';

server {
    listen unix:%%PREFIX%%/up.sock;
    location /tokens { add_header X-Tokens-Used $arg_t always; return 200 "ok\n"; }
}

server {
    listen 127.0.0.1:%%PORT%%;
    access_log %%PREFIX%%/charged.log charged;

    # failed attempts only, then a ban
    location /login {
        ratelimit zone=login key=$http_x_client algorithm=sliding_log limit=5 period=1s
                  charge=$login_failed ban=6s name=login;
        auth_basic "login";
        auth_basic_user_file %%PREFIX%%/htpasswd;
        alias %%PREFIX%%/html/index.html;
    }
    # tokens an upstream reports
    location /ai {
        ratelimit zone=ai key=$http_x_api_key limit=1000 period=1000s
                  charge=$upstream_http_x_tokens_used name=tokens;
        proxy_pass http://unix:%%PREFIX%%/up.sock:/tokens;
    }
    # a constant charge for a large, slow answer
    location = /big {
        ratelimit zone=misc key=$http_x_client limit=100 period=1h charge=7 name=slow;
        limit_rate 20k;
    }
    # a charge read from the client (for the test only: never do this)
    location /bad {
        ratelimit zone=misc limit=100000 period=1h charge=$http_x_charge name=bad;
        alias %%PREFIX%%/html/index.html;
    }
    # an internal redirect: charged once
    location /redirected {
        ratelimit zone=misc key=$http_x_client limit=100 period=1h charge=$http_x_c name=redirect;
        error_page 404 = /index.html;
    }
    location /rl/ { ratelimit_api write=on; }
    location = /stats { ratelimit_stats; }
}
EOF

sub login {
    my ($client, $pw) = @_;
    return $t->get('/login', { 'X-Client' => $client, Authorization => RLTest::basic_auth("alice:$pw") });
}

# ---- login: failures only, then a ban ----

is(scalar(grep { login('c1', 'right')->{status} == 200 } 1 .. 20), 20, '20 successful logins in a row: all served');
is(login('c1', 'wrong')->{status}, 401, "failure $_: 401") for 1 .. 5;
my $banned_at = RLTest::check_ban(sub { login('c1', 'right') }, '');
my $r;
my $top = $t->get_json('/rl/zones/login/top?rule=login')->{rules}{login}{keys};
ok((grep { ($_->{banned_ms} // 0) > 0 } @$top) == 1, 'the top keys show the ban') or diag(explain($top));
my $api = $t->get_json('/rl/zones/login/keys?key=c1&rule=login');
ok($api->{rules}[0]{banned_ms} > 0, 'the key API says until when it is banned') or diag(explain($api));
sleep 0.05 while time < $banned_at + 6.05;
is(login('c1', 'right')->{status}, 200, 'admitted after the ban');

# a ban lifted by the key API
login('c2', 'wrong') for 1 .. 5;
is(login('c2', 'right')->{status}, 429, 'c2 banned');
is($t->request('DELETE', '/rl/zones/login/keys?key=c2')->{status}, 200, 'key API DELETE');
is(login('c2', 'right')->{status}, 200, 'admitted after the DELETE');

# ---- tokens an upstream reports ----

for my $i (1 .. 3) {
    $r = $t->get('/ai?t=400', { 'X-Api-Key' => 'k1' });
    is($r->{status}, 200, "tokens: request $i served");
}
$r = $t->get('/ai?t=400', { 'X-Api-Key' => 'k1' });
is($r->{status}, 429, 'tokens: the fourth refused (1,200 of 1,000 spent: 200 in debt)');
my $ra = $r->{headers}{'retry-after'};
ok($ra >= 200 && $ra <= 201, "Retry-After matches the debt and the request's own unit: $ra s (201 at a unit a second)");
is($t->get('/ai?t=400', { 'X-Api-Key' => 'k2' })->{status}, 200, 'another key is served');
# charges settle in the log phase, once the response went out
RLTest::wait_until(sub { $t->rule_stats('ai', 'tokens')->{charged} == 1600 }, 5);
my $s = $t->rule_stats('ai', 'tokens');
is($s->{charged}, 1600, 'stats: 1,600 units charged');
is($s->{debts}, 1, 'stats: one request ended in debt');
$t->log_like(qr{^/ai 200 400$}m, '$ratelimit_charged in the access log', file => 'charged.log');

# ---- a client that goes away early is charged once ----

{
    my $sock = $t->open_request('/big', { 'X-Client' => 'early' });
    my $buf = '';
    sysread($sock, $buf, 4096);
    like($buf, qr{^HTTP/1\.1 200 }, 'a slow answer starts');
    close $sock;
    RLTest::wait_until(sub { ($t->rule_stats('misc', 'slow')->{charged} // 0) > 0 }, 10);
    is($t->rule_stats('misc', 'slow')->{charged}, 7, 'the client closed early: charged once, 7 units');
    is($t->key_rule('misc', 'early', 'slow')->{remaining}, 93, 'the key has 93 of 100 left');
}

# ---- an internal redirect is charged once ----

is($t->get('/redirected/missing', { 'X-Client' => 'r1', 'X-C' => 5 })->{status}, 200, 'error_page redirects');
RLTest::wait_until(sub { ($t->rule_stats('misc', 'redirect')->{charged} // 0) > 0 }, 5);
is($t->rule_stats('misc', 'redirect')->{charged}, 5, 'charged once across the redirect');
is($t->key_rule('misc', 'r1', 'redirect')->{remaining}, 95, 'the key spent 5');

# ---- a bad charge value spends the cost, logged folded ----

my $before = $t->rule_stats('misc', 'bad')->{charged} // 0;
my %st = $t->pipelined('/bad', 'X-Charge', ('abc') x 50);
is($st{200}, 50, '50 requests with a bad charge served');
RLTest::wait_until(sub { $t->rule_stats('misc', 'bad')->{charged} == $before + 50 }, 5);
is($t->rule_stats('misc', 'bad')->{charged}, $before + 50, 'each spent its cost (1)');
$t->wait_log(qr/more requests with a bad value \(see above\) by rule "bad"/, timeout => 3);
my @lines = $t->error_log =~ /rule "bad" in zone "misc": charge "abc" is not a non-negative integer, the request's cost \(1\) is charged/g;
ok(@lines >= 1 && @lines <= 3, scalar(@lines) . ' line(s) for 50 bad values');
like($t->error_log, qr/ratelimit: (\d+) more requests with a bad value \(see above\) by rule "bad"/, 'the rest folded');

# ---- configuration ----

for my $case (
    [ 'ratelimit zone=misc algorithm=leaky_bucket limit=5 charge=$status;',
      qr/"ratelimit" directive: "charge=" does not apply to algorithm=leaky_bucket: a shaper sets each request's delay before it is served/ ],
    [ 'ratelimit zone=misc limit=5 ban=0;', qr/invalid "ban=0": expected a time from 1ms to 366d/ ],
    [ 'ratelimit zone=misc limit=5 charge=;', qr/invalid "charge=": expected a value/ ],
) {
    $t->conf_refused("ratelimit_zone misc 1m;\n" . RLTest::one_location($case->[0]), $case->[1], $case->[0]);
}

$t->stop();
done_testing();
