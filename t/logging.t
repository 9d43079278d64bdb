#!/usr/bin/perl
# Logs that survive a flood and keep secrets: rejections of one key are
# folded to a line a second plus a count of the rest; a flood of distinct
# keys writes at most ten lines a second a rule; keys are named by a
# fingerprint ($ratelimit_fingerprint gives the same) unless log_key=on;
# ratelimit_log_level off writes nothing.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest;

my $secret = 'sk_live_4f9a8b7c6d5e4f3a2b1c';

my $t = RLTest->new->start(<<'EOF');
keepalive_requests 100000000;
log_format fp '$http_x_api_key $ratelimit_fingerprint $status';
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location /api/ {
        ratelimit zone=z key=$http_x_api_key limit=1 period=1h name=api;
        access_log %%PREFIX%%/fp.log fp;
        alias %%PREFIX%%/html/;
    }
    location /quiet/ {
        ratelimit zone=z key=$http_x_api_key limit=1 period=1h name=quiet;
        ratelimit_log_level off;
        alias %%PREFIX%%/html/;
    }
}
EOF

# The lines that log rule R's rejections, and those that count the folded ones.
sub rejections {
    my ($rule) = @_;
    return (qr/ratelimit: rejected by rule "$rule" in zone "z"/, qr/ratelimit: (\d+) more rejections by rule "$rule" in zone "z"/);
}

# 10,000 rejections of one key
my $start = time;
my %s = $t->pipelined('/api/index.html', 'X-Api-Key', ($secret) x 10001);
my $took = time - $start;
is($s{429}, 10000, '10,000 rejections of one key');
my ($lines, $folded) = $t->wait_folded(rejections('api'), 10000, timeout => 5);
is($lines + $folded, 10000, "every rejection is a line or in a count ($lines lines, $folded folded)");
ok($lines <= 2 + int($took) + 1, "one key: $lines lines in " . sprintf('%.1f', $took) . ' s (at most one a second)');
my @summaries = $t->error_log =~ /more rejections by rule "api"/g;
ok(@summaries <= 3 + int($took), scalar(@summaries) . ' summary lines');

unlike($t->error_log, qr/\Q$secret\E/, 'the secret key never appears in error.log');
my ($fp) = $t->error_log =~ /rejected by rule "api" in zone "z", key fingerprint ([0-9a-f]{16})/;
ok(defined $fp, 'the key is named by its fingerprint');
like($t->file('fp.log'), qr/^\Q$secret\E \Q$fp\E 429$/m,
     '$ratelimit_fingerprint in the access log is the one in error.log');

# 3,000 distinct keys, each admitted then rejected: at most ten lines a
# second for the rule, the rest counted
my @keys = map { "flood-$_" } 1 .. 3000;
$start = time;
%s = $t->pipelined('/api/index.html', 'X-Api-Key', map { ($_, $_) } @keys);
$took = time - $start;
is($s{429}, 3000, '3,000 distinct keys rejected once each');
($lines, $folded) = $t->wait_folded(rejections('api'), 13000, timeout => 5);
is($lines + $folded, 13000, "every rejection is a line or in a count ($lines lines, $folded folded)");
ok($lines <= 10 * (int($took) + 2) + 3, "distinct keys: $lines lines in " . sprintf('%.1f', $took) . ' s (at most ten a second)');

# ratelimit_log_level off: nothing at all
%s = $t->pipelined('/quiet/index.html', 'X-Api-Key', ('q') x 1001);
is($s{429}, 1000, 'log level off: 1,000 rejections');
sleep 1.5;
my ($ql, $qf) = $t->folded(rejections('quiet'));
is("$ql $qf", '0 0', 'log level off: no line, no count');

$t->stop();
done_testing();
