#!/usr/bin/perl
# ratelimit_stats: JSON and Prometheus text, counts checked against the
# requests sent, counters shared by workers and kept across a reload, and
# no key values in the output.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $t = RLTest->new();
my $body = <<'EOF';
ratelimit_zone api 1m;
ratelimit_zone odd-zone.v2_ 64k;
server {
    listen 127.0.0.1:%%PORT%%;
EOF
$body .= RLTest::locations(
    '/a/' => 'ratelimit zone=api key=$http_x_user limit=3 period=1h name=a;',
    '/dry/' => 'ratelimit zone=api key=$http_x_user limit=1 period=1h name=dry; ratelimit_dry_run on;',
    '/shape/' => 'ratelimit zone=api key=$http_x_user algorithm=leaky_bucket limit=4 period=1s name=shape;',
    '/stacked/' => 'ratelimit zone=api key=$http_x_user limit=2 period=1h name=narrow;
                    ratelimit zone=odd-zone.v2_ key=$http_x_user limit=10 period=1h name=wide;');
$body .= <<'EOF';
    location = /stats {
        ratelimit_stats;
        allow 127.0.0.1;
        deny all;
    }
}
EOF
$t->write_conf($body, workers => 2);
$t->start();

$t->gets('/a/index.html', 5, { 'X-User' => 'alice' });       # 3 allowed, 2 rejected
$t->gets('/a/index.html', 2);                                # exempt: no X-User
$t->gets('/dry/index.html', 3, { 'X-User' => 'dan' });       # 1 allowed, 2 dry-run rejected
$t->gets('/shape/index.html', 3, { 'X-User' => 'sam' });     # 1 at once, 2 delayed (250 ms each: a slow run still arrives early)
$t->gets('/stacked/index.html', 4, { 'X-User' => 'stu' });   # 2 allowed by both, 2 rejected by narrow

my $r = $t->get('/stats');
is($r->{status}, 200, 'stats: 200');
is($r->{headers}{'content-type'}, 'application/json', 'stats: JSON by default');
my $s = RLTest::json_of($r);
open(my $vf, '<', "$FindBin::Bin/../VERSION") or die "VERSION: $!";
chomp(my $version = <$vf>);
is($s->{version}, $version, "json: the module's version ($version, from VERSION)");
my $api = $s->{zones}{api};
is_deeply($api->{rules}{a}, { allowed => 3, rejected => 2, delayed => 0, dry_run_rejected => 0, exempt => 2,
                                 charged => 0, debts => 0, in_flight => 0, peak => 0, waited => 0, bans => 0,
                                 dry_run_bans => 0, limit_now => 0, baseline_us => 0,
                                 recent_us => 0, overrides => 0, overridden => 0,
                                 bytes => 0, bytes_per_second => 0, connections => 0, delayed_now => 0 },
          'json: rule a');
is_deeply($api->{rules}{dry}, { allowed => 1, rejected => 0, delayed => 0, dry_run_rejected => 2, exempt => 0,
                                   charged => 0, debts => 0, in_flight => 0, peak => 0, waited => 0, bans => 0,
                                 dry_run_bans => 0, limit_now => 0, baseline_us => 0,
                                 recent_us => 0, overrides => 0, overridden => 0,
                                 bytes => 0, bytes_per_second => 0, connections => 0, delayed_now => 0 },
          'json: dry run');
is($api->{rules}{shape}{delayed}, 2, 'json: delayed');
is($api->{rules}{shape}{allowed}, 1, 'json: shaped, not delayed');
is_deeply($api->{rules}{narrow}, { allowed => 2, rejected => 2, delayed => 0, dry_run_rejected => 0, exempt => 0,
                                      charged => 0, debts => 0, in_flight => 0, peak => 0, waited => 0, bans => 0,
                                 dry_run_bans => 0, limit_now => 0, baseline_us => 0,
                                 recent_us => 0, overrides => 0, overridden => 0,
                                 bytes => 0, bytes_per_second => 0, connections => 0, delayed_now => 0 },
          'json: stacked, narrow rule');
is($s->{zones}{'odd-zone.v2_'}{rules}{wide}{allowed}, 2, 'json: stacked, the other rule spent only the admitted');
is($s->{zones}{'odd-zone.v2_'}{rules}{wide}{rejected}, 0, 'json: and rejected none');
is($api->{keys}, 4, 'json: keys held (alice, dan, sam, stu)');
is($api->{size}, 1048576, 'json: size');
ok($api->{capacity} > 40000, "json: capacity $api->{capacity}");
ok($api->{bytes_used} > 0 && $api->{bytes_used} < $api->{size}, 'json: bytes used');
is($api->{evictions}, 0, 'json: no evictions');
unlike($r->{content}, qr/alice|dan|sam|stu/, 'json: no key values');

$r = $t->get('/stats?format=prometheus');
is($r->{headers}{'content-type'}, 'text/plain; version=0.0.4', 'prometheus: content type');
my $p = $r->{content};
my %v;
for my $line (split /\n/, $p) {
    next if $line =~ /^# (HELP|TYPE) nginx_ratelimit_\w+ /;
    like($line, qr/^nginx_ratelimit_\w+\{zone="(?:[^"\\]|\\.)*"(?:,rule="[\w.-]+"(?:,fingerprint="[0-9a-f]{16}")?)?\} \d+$/,
         "prometheus line: $line")
        or last;
    my ($name, $labels, $value) = $line =~ /^(\w+)\{(.*)\} (\d+)$/;
    $v{"$name\{$labels\}"} = $value;
}
is($v{'nginx_ratelimit_allowed_total{zone="api",rule="a"}'}, 3, 'prometheus: allowed');
is($v{'nginx_ratelimit_rejected_total{zone="api",rule="a"}'}, 2, 'prometheus: rejected');
is($v{'nginx_ratelimit_exempt_total{zone="api",rule="a"}'}, 2, 'prometheus: exempt');
is($v{'nginx_ratelimit_dry_run_rejected_total{zone="api",rule="dry"}'}, 2, 'prometheus: dry run rejected');
is($v{'nginx_ratelimit_delayed_total{zone="api",rule="shape"}'}, 2, 'prometheus: delayed');
is($v{'nginx_ratelimit_allowed_total{zone="odd-zone.v2_",rule="wide"}'}, 2, 'prometheus: a zone name with every mark allowed');
is($v{'nginx_ratelimit_zone_size_bytes{zone="api"}'}, 1048576, 'prometheus: zone size');
is($v{'nginx_ratelimit_zone_keys{zone="api"}'}, 4, 'prometheus: keys');
my @top = grep { /^nginx_ratelimit_top_refused\{zone="api",rule="a",/ } keys %v;
is(scalar @top, 1, 'prometheus: the key rule a refuses, by its fingerprint');
is($v{ $top[0] // '' }, 2, 'prometheus: refused twice');
unlike($p, qr/alice|dan|sam|stu/, 'prometheus: no key values (no rule here logs keys in clear)');
for my $m (qw(zone_size_bytes zone_used_bytes zone_keys zone_capacity_keys zone_evictions_total
              zone_live_evictions_total allowed_total rejected_total delayed_total dry_run_rejected_total
              exempt_total top_refused)) {
    my $type = $m =~ /_total$/ ? 'counter' : 'gauge';
    like($p, qr/^# HELP nginx_ratelimit_$m \S.*\n# TYPE nginx_ratelimit_$m $type$/m, "prometheus: $m described");
}

# a reload keeps the zones, and so the counters
$t->reload($body, workers => 2);
$t->get('/a/index.html', { 'X-User' => 'alice' });
$s = $t->stats;
is($s->{zones}{api}{rules}{a}{rejected}, 3, 'reload: counters kept and counting');
is($s->{zones}{api}{keys}, 4, 'reload: keys kept');

$t->stop();
$t->start();
$s = $t->stats;
is($s->{zones}{api}{rules}{a}{rejected}, 0, 'restart: counters start at zero');
$t->stop();

done_testing();
