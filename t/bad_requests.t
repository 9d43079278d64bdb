#!/usr/bin/perl
# Hostile requests get the documented handling, never a crash: empty keys
# are exempt, a 1 MB key costs one slot and is logged escaped and cut,
# invalid UTF-8 and control bytes in keys are limited like any bytes and
# escaped in the log, and a cost that is not a non-negative integer counts
# as 1.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $t = RLTest->new->start(<<'EOF', workers => 2);
large_client_header_buffers 4 2m;
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location / {
        ratelimit zone=z key=$http_x_key limit=1 period=1h name=keyed log_key=on;
    }
    location /cost/ {
        ratelimit zone=z key=$http_x_key limit=5 period=1h cost=$arg_c name=costly;
        alias %%PREFIX%%/html/;
    }
}
EOF

# a request written by hand, so that any bytes can go in a header: its status
sub raw {
    my ($path, $key) = @_;
    return $t->get_raw($path, { defined $key ? ('X-Key' => $key) : () })->{status};
}

is(join(' ', map { raw('/index.html', '') } 1 .. 3), '200 200 200', 'an empty key: exempt');
is(join(' ', map { raw('/index.html') } 1 .. 3), '200 200 200', 'no key header: exempt');

my $big = 'A' x (1 << 20);
is(raw('/index.html', $big), 200, 'a 1 MB key: admitted');
is(raw('/index.html', $big), 429, 'a 1 MB key: then limited');
is(raw('/index.html', $big . 'B'), 200, 'a key one byte longer is another key');

my $bytes = "\xff\xfe\x80caf\xc3 \x01\x7f\"";
is(raw('/index.html', $bytes), 200, 'invalid UTF-8 and control bytes: admitted');
is(raw('/index.html', $bytes), 429, 'invalid UTF-8 and control bytes: then limited');

for my $cost ('-1', 'abc', '99999999999999999999', '1.5', '%20', '') {
    my $key = "cost$cost";
    my @s = map { raw("/cost/index.html?c=$cost", $key) } 1 .. 6;
    is("@s", '200 200 200 200 200 429', "cost \"$cost\" counts as 1");
}
is(raw('/cost/index.html?c=6', 'six'), 429, 'a cost above what the rule can admit: denied');
is(raw('/cost/index.html?c=5', 'six'), 200, '... consuming nothing');

$t->stop();
my $log = $t->error_log;
like($log, qr/rejected by rule "keyed" in zone "z", key "A{64}\.\.\.", cost 1/, 'a long key is cut in the log');
like($log, qr/key "\\xff\\xfe\\x80caf\\xc3 \\x01\\x7f\\x22", cost 1/, 'key bytes are escaped in the log');
my @warn = $log =~ /cost "[^"]*" is not a non-negative integer, counted as 1/g;
ok(@warn >= 1, 'a bad cost is logged (' . scalar(@warn) . ' lines, the rest folded)');
unlike($log, qr/A{65}/, 'the whole key is never logged');
done_testing();
