#!/usr/bin/perl
# What ratelimit_stats and the key API answer stays valid JSON and
# Prometheus text whatever bytes a client or a configuration puts in it: a
# key expression holding a tab, a control byte, UTF-8 and a byte that is not
# UTF-8; keys of every byte value, refused (top keys, in clear with
# log_key=on) and asked about; the answer's length what it says.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use JSON::PP;
use IO::Socket::INET;
use RLTest;

my $t = RLTest->new();
# the key expression's bytes: a tab, \x01, e-acute in UTF-8, and \xff
my $expr = "k:\$http_x_k\t\x01\xc3\xa9\xff";
$t->write_conf(<<"EOF");
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location /p/ {
        ratelimit zone=z "key=$expr" limit=1 period=1h name=odd log_key=on;
        alias %%PREFIX%%/html/;
    }
    location /rl/ { ratelimit_api write=on; }
    location = /stats { ratelimit_stats; }
}
EOF
$t->start();

# every byte value in keys (a header value cannot hold NUL, CR or LF)
my @keys = map { my $b = $_; join '', map { chr(($b * 31 + $_) % 256) } 0 .. 40 } 0 .. 20;
s/[\x00\r\n]/x/g for @keys;
my @status;
for my $k (@keys) {
    for (1 .. 2) {
        # raw: an HTTP client library would refuse such header values
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port, Proto => 'tcp') or die;
        print $s "GET /p/index.html HTTP/1.0\r\nX-K: $k\r\n\r\n";
        push @status, (<$s> // '') =~ m{^HTTP/1\.\d (\d+)} ? $1 : 0;
    }
}
is(join(' ', @status), join(' ', ('200 429') x @keys), 'each key admitted once, then refused');

sub json_of {
    my ($path, $what) = @_;
    my $r = $t->get($path);
    is($r->{headers}{'content-length'}, length($r->{content}), "$what: the length said is the length sent");
    my $j = eval { JSON::PP->new->utf8->decode($r->{content}) };
    ok($j, "$what: valid JSON (UTF-8)") or diag($@, substr($r->{content}, 0, 300));
    return $j;
}

my $zone = json_of('/rl/zones/z', 'zones/z');
is($zone->{rules}{odd}{key}, "k:\$http_x_k\t\x01\x{e9}\x{fffd}",
   'a key expression: tab and control byte as they are, UTF-8 read, a byte that is not UTF-8 as U+FFFD');

my $stats = json_of('/stats', 'stats');
is($stats->{zones}{z}{rules}{odd}{rejected}, scalar @keys, 'stats: each key refused once');

my $top = json_of('/rl/zones/z/top', 'top');
my @shown = map { $_->{key} } @{ $top->{rules}{odd}{keys} };
is(scalar @shown, scalar @keys, 'top: every key listed');
ok(!(grep { /[^\x20-\x7e]/ } @shown), 'top: keys shown in printable ASCII (escaped as log lines escape them)');
like(join('', @shown), qr/\\x[0-9a-f]{2}/, 'top: bytes outside it as \\xNN');

my $all = join '', map { chr } 0 .. 255;
(my $uri = $all) =~ s/([^A-Za-z0-9])/sprintf('%%%02X', ord $1)/ge;
my $k = json_of("/rl/zones/z/keys?key=$uri", 'keys, every byte');
like($k->{key}, qr/^\\x00\\x01.*\.\.\.$/, 'keys: every byte value shown escaped, cut at 64 bytes');

my $p = $t->get('/stats?format=prometheus');
is($p->{headers}{'content-length'}, length($p->{content}), 'Prometheus: the length said is the length sent');
my $value = qr/"(?:[^"\\\n]|\\["\\n])*"/;
my @bad = grep { !/^(?:# (?:HELP|TYPE) \w+ .+|\w+\{\w+=$value(?:,\w+=$value)*\} \d+(?:\.\d+)?)$/ } split /\n/, $p->{content};
ok(!@bad, 'Prometheus: every line a comment or a sample, label values escaped') or diag(join "\n", @bad[0 .. 4]);
ok(utf8::decode(my $copy = $p->{content}), 'Prometheus: UTF-8');
is(scalar(() = $p->{content} =~ /^nginx_ratelimit_top_refused\{zone="z",rule="odd",fingerprint="[0-9a-f]{16}",key="/mg),
   scalar @keys, 'Prometheus: every refused key, in clear (escaped)');

$t->stop();
done_testing();
