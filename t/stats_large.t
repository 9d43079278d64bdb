#!/usr/bin/perl
# ratelimit_stats with 1,000 rules of the longest names in 20 zones (the
# longest zone names, with every mark a name may hold, among them): the output, many buffers long, is whole, valid
# JSON, and valid Prometheus text exposition (checked by a strict parser:
# every line a comment or a sample, names and labels well formed, label
# values escaped, each family described once before its samples), and it
# names every zone and every rule exactly once in each.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my (@zones, %rules);
my $conf = '';
for my $z (1 .. 20) {
    # some of 63 characters with "-", "." and "_"
    my $zone = $z % 5 ? "zone$z" : sprintf('z-%02d.', $z) . ('_' x 58);
    push @zones, $zone;
    $conf .= "ratelimit_zone $zone 256k;\n";
    for my $r (1 .. 50) {
        my $name = sprintf('r%02d-%02d-', $z, $r) . ('n' x 56);   # 63 characters
        $rules{ $zones[-1] }{$name} = 1;
        $conf .= "    location /$z/$r/ { ratelimit zone=$zone limit=5 name=$name; alias %%PREFIX%%/html/; }\n";
    }
}
my $t = RLTest->new->start(join("\n", grep { !/^    location/ } split /\n/, $conf) . <<"EOF");

server {
    listen 127.0.0.1:%%PORT%%;
@{[ join "\n", grep { /^    location/ } split /\n/, $conf ]}
    location = /stats {
        ratelimit_stats;
    }
}
EOF

# some counting
is($t->get("/3/7/index.html")->{status}, 200, 'a request through one of the rules');

my $json = $t->get('/stats');
is($json->{status}, 200, 'JSON: 200');
ok(length($json->{content}) > 100_000, 'JSON: ' . length($json->{content}) . ' bytes (several buffers)');
is($json->{headers}{'content-length'}, length($json->{content}), 'JSON: the length said is the length sent');
my $s = RLTest::json_of($json);
ok($s, 'JSON: valid') or diag($@);
is_deeply([ sort keys %{ $s->{zones} } ], [ sort @zones ], 'JSON: every zone, its name unescaped right');
my $all = 1;
for my $z (@zones) {
    $all &&= join(',', sort keys %{ $s->{zones}{$z}{rules} }) eq join(',', sort keys %{ $rules{$z} });
}
ok($all, 'JSON: every rule of every zone');
is($s->{zones}{zone3}{rules}{ sprintf('r03-07-') . ('n' x 56) }{allowed}, 1, 'JSON: the request counted');

my $p = $t->get('/stats?format=prometheus');
is($p->{status}, 200, 'Prometheus: 200');
is($p->{headers}{'content-length'}, length($p->{content}), 'Prometheus: the length said is the length sent');

# A strict reader of the text exposition format 0.0.4.
my (%type, %help, %samples, @errors);
my $name_re = qr/[a-zA-Z_:][a-zA-Z0-9_:]*/;
my $value_re = qr/"(?:[^"\\\n]|\\["\\n])*"/;
for my $line (split /\n/, $p->{content}, -1) {
    next if $line eq '';
    if ($line =~ /^# HELP ($name_re) (.*)$/) {
        push @errors, "HELP twice: $1" if $help{$1}++;
        push @errors, "HELP after samples: $1" if $samples{$1};
    } elsif ($line =~ /^# TYPE ($name_re) (counter|gauge|histogram|summary|untyped)$/) {
        push @errors, "TYPE twice: $1" if $type{$1}++;
        push @errors, "TYPE after samples: $1" if $samples{$1};
    } elsif ($line =~ /^($name_re)(?:\{((?:$name_re=$value_re)(?:,$name_re=$value_re)*)\})? (-?[0-9.]+(?:e[+-]?\d+)?|\+Inf|NaN)$/) {
        my $family = $1;
        $family =~ s/_(bucket|sum|count)$// unless $type{$family};
        push @errors, "sample before its TYPE: $1" unless $type{$family} || $type{$1};
        $samples{$family}++;
    } else {
        push @errors, "not a comment or a sample: $line";
    }
}
is(scalar @errors, 0, 'Prometheus: every line well formed') or diag(join "\n", @errors[0 .. 9]);
is($samples{nginx_ratelimit_allowed_total}, 1000, 'Prometheus: a sample for each of the 1,000 rules');
is($samples{nginx_ratelimit_zone_keys}, 20, 'Prometheus: a sample for each zone');
like($p->{content}, qr/\Qnginx_ratelimit_zone_keys{zone="z-05.\E_{58}"\} \d+/,
     'Prometheus: a zone name of 63 characters with its marks, as it is');

$t->stop();
done_testing();
