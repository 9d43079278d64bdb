#!/usr/bin/perl
# What the module writes to the error log holds nothing a client chose in
# clear or raw:
# - a rule with log_key=off writes lines with no byte of its key, whatever
#   the key is made of (a query argument, the URI, a header, the Referer):
#   the module's lines name the client and the server, never the request
#   line, Host or Referer that nginx's own context would add;
# - a value a client sent (a bad cost) is quoted and escaped;
# - the key API's reset line escapes and cuts the user name the client
#   sent, and says whether auth_basic verified it.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $secret = 'sk_live_9Q7x3Vb2Lm8Tz';

my $t = RLTest->new();
$t->put_file('htpasswd', "ops:{PLAIN}secret\n");
$t->start(<<'EOF'
keepalive_requests 100000000;
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    server_name logs.test;

EOF
    # one rule a key a client chooses, each its own name
    . join('', map { "    location /$_->[0]/ { ratelimit zone=z key=$_->[1] limit=1 period=1h name=$_->[2];"
                     . " try_files /index.html =404; }\n" }
                   [arg => '$arg_k', 'by_arg'], [uri => '$uri', 'by_uri'],
                   [hdr => '$http_x_key', 'by_header'], [ref => '$http_referer', 'by_referer'])
    . <<'EOF', log_level => 'info');
    # delays log at info: a shaping rule whose key is the query
    location /shape/ {
        ratelimit zone=z key=$arg_k algorithm=leaky_bucket limit=1 period=1s name=shaped;
        ratelimit_log_level notice;
        try_files /index.html =404;
    }
    # a bad cost: the value is the client's, quoted and escaped
    location /cost/ {
        ratelimit zone=z key=$arg_k limit=100 period=1h cost=$http_x_cost name=costly;
        try_files /index.html =404;
    }
    # every value of the key in clear, escaped
    location /clear/ {
        ratelimit zone=z key=$http_x_key limit=1 period=1h name=clear log_key=on;
        try_files /index.html =404;
    }

    location /rl/ { ratelimit_api write=on; }
    location /basic/ {
        auth_basic "rate limits";
        auth_basic_user_file %%PREFIX%%/htpasswd;
        ratelimit_api write=on;
    }
    location /anyone/ {
        satisfy any;
        allow 127.0.0.1;
        deny all;
        auth_basic "rate limits";
        auth_basic_user_file %%PREFIX%%/htpasswd;
        ratelimit_api write=on;
    }
}
EOF

# ---- log_key=off: the key is nowhere in the log ----

my %twice = (
    by_arg     => sub { $t->get("/arg/x?k=$secret") },
    by_uri     => sub { $t->get("/uri/$secret") },
    by_header  => sub { $t->get('/hdr/x', { 'X-Key' => $secret }) },
    by_referer => sub { $t->get('/ref/x', { 'Referer' => "https://$secret.example/" }) },
);
for my $rule (sort keys %twice) {
    is($twice{$rule}->()->{status}, 200, "$rule: first request served");
    is($twice{$rule}->()->{status}, 429, "$rule: second refused");
}
$t->get("/shape/x?k=$secret") for 1 .. 2;   # the second is delayed
# a request as bytes (HTTP::Tiny refuses control bytes in a header)
like($t->raw("GET /cost/x?k=$secret HTTP/1.0\r\nX-Cost: 1\"\\\x7f\x01[warn] forged\r\n\r\n"), qr/^HTTP\/1\.1 200 /,
     'a bad cost counts as 1');

$t->wait_log(qr/by rule "shaped"/);
my $log = $t->wait_log(qr/rule "costly"/);

for my $rule (qw(by_arg by_uri by_header by_referer)) {
    like($log, qr/ratelimit: rejected by rule "$rule" in zone "z", key fingerprint [0-9a-f]{16}, cost 1, retry after \d+ ms, client: 127\.0\.0\.1, server: logs\.test$/m,
         "$rule: the line names the rule, the fingerprint, the client and the server, and ends there");
}
like($log, qr/ratelimit: delaying by rule "shaped" in zone "z", key fingerprint [0-9a-f]{16}, cost 1, for \d+ ms, client: 127\.0\.0\.1, server: logs\.test$/m,
     'a delay: the same context');
unlike($log, qr/\Q$secret\E/, 'no key in clear anywhere in the error log');
unlike($log, qr/request: |referrer: |host: /, 'no request line, Host or Referer in the module\'s lines');

like($log, qr/rule "costly" in zone "z": cost "1\\x22\\x5c\\x7f\\x01\[warn\] forged" is not a non-negative integer, counted as 1, client: 127\.0\.0\.1, server: logs\.test$/m,
     'a bad value: quoted and escaped on one line');

# log_key=on: the key, escaped, on one line
$t->get('/clear/x', { 'X-Key' => "k\"\\ey" }) for 1 .. 2;
$t->log_like(qr/rejected by rule "clear" in zone "z", key "k\\x22\\x5cey", cost 1/, 'log_key=on: the key escaped');

# ---- the key API's reset line ----

sub reset_line {
    my ($path, $user) = @_;
    my $before = length $t->error_log;
    my $r = $t->request('DELETE', "$path/zones/z/keys?key=nobody&rule=by_header",
                        { Authorization => RLTest::basic_auth($user) });
    RLTest::wait_until(sub { length($t->error_log) > $before }, 5);
    return ($r, substr($t->error_log, $before));
}

my ($r, $lines) = reset_line('/rl', "evil\n2026/01/01 [warn] forged\":pw");
is($r->{status}, 200, 'a reset without auth_basic is answered');
like($lines, qr/reset in rule "by_header" of zone "z" by the key API \(it had no state\), client 127\.0\.0\.1, user "evil\\x0a2026\/01\/01 \[warn\] forged\\x22" \(unverified: as the Authorization header says\)\n\z/,
     'the user name escaped, on one line, unverified');
unlike($t->error_log, qr/^2026\/01\/01 \[warn\]/m, 'no forged line');

($r, $lines) = reset_line('/rl', ('u' x 500) . ':pw');
like($lines, qr/, user "u{64}\.\.\." \(unverified/, 'a long user name is cut');

($r, $lines) = reset_line('/basic', 'ops:secret');
is($r->{status}, 200, 'auth_basic: the right password is answered');
like($lines, qr/client 127\.0\.0\.1, user "ops" \(verified by auth_basic\)\n\z/, 'auth_basic: verified');

is($t->request('DELETE', '/basic/zones/z/keys?key=nobody', { Authorization => RLTest::basic_auth('ops:wrong') })->{status}, 401,
   'auth_basic: a wrong password is refused');

($r, $lines) = reset_line('/anyone', 'ops:wrong');
is($r->{status}, 200, 'satisfy any: the address lets it in');
like($lines, qr/user "ops" \(unverified: as the Authorization header says\)\n\z/,
     'satisfy any: a user auth_basic did not check is unverified');

$t->stop();
done_testing();
