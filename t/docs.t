#!/usr/bin/perl
# README.md and docs/*.md hold together (docs/architecture.md, "The docs"):
# every nginx block passes nginx -t as the page shows it (wrapped by what it
# holds, RLTest::doc_conf), with no warning; every relative link and #anchor
# points to a file and a heading that exist (GitHub's anchors); no section
# heading is written twice; every directive of the module's command tables
# has its section in docs/directives.md (Syntax, Default, Context, Phase)
# and its line in README's summary, and every variable its row; and every
# version the docs name is VERSION's.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use File::Basename qw(dirname);
use File::Spec;
use Test::More;
use RLTest;
use RLCerts;

my $root = File::Spec->rel2abs("$FindBin::Bin/..");
my @files = ('README.md', map { File::Spec->abs2rel($_, $root) } sort glob "$root/docs/*.md");
ok(@files > 5, 'README.md and the docs: ' . join(' ', @files));

sub text_of {
    my ($file) = @_;
    open(my $fh, '<:encoding(UTF-8)', "$root/$file") or return undef;
    local $/;
    return <$fh>;
}

# The Markdown outside fenced code blocks, inline code kept as its text.
sub prose {
    my ($text) = @_;
    my ($in, @out) = (0);
    for (split /\n/, $text) {
        if (/^```/) {
            $in = !$in;
            next;
        }
        push @out, $_ unless $in;
    }
    return join "\n", @out;
}

# GitHub's anchor of a heading: its text lowercased, everything but
# letters, digits, '_', '-' and spaces dropped, spaces made '-'.
sub anchor {
    my ($h) = @_;
    $h =~ s/!?\[([^\]]*)\]\([^)]*\)/$1/g;
    $h = lc $h;
    $h =~ s/[^\w\- ]//g;
    $h =~ tr/ /-/;
    return $h;
}

# A Markdown file's headings: ([level, title, anchor], ...), a repeated
# anchor suffixed -1, -2 as GitHub does.
my %headings;
sub headings {
    my ($file) = @_;
    return @{ $headings{$file} //= do {
        my (%seen, @h);
        for (split /\n/, prose(text_of($file) // '')) {
            next unless /^(#{1,6})\s+(.*?)\s*$/;
            my $a = anchor($2);
            my $n = $seen{$a}++;
            push @h, [ length $1, $2, $n ? "$a-$n" : $a ];
        }
        \@h;
    } };
}

# --- every nginx block passes nginx -t; the files an example names under
# /etc/nginx/redis/ (a CA, a password file) are made by the test
{
    my $t = RLTest->new();
    my $certs;
    for my $file (@files) {
        for my $b (grep { $_->{lang} eq 'nginx' } RLTest::doc_code($file)) {
            my $title = (grep { defined } @{ $b->{headings} })[-1] // 'the top';
            my $name = "$file:$b->{line} (\"$title\")";
            my $text = $b->{text};
            if ($text =~ /redis_tls=on/ && (my $why = RLTest::ssl_missing())) {
                diag("$name: not tried: $why");
                next;
            }
            if ($text =~ m{/etc/nginx/redis/}) {
                $certs //= RLCerts::make() // do { diag("$name: no openssl to make its files"); next };
                for my $f ($text =~ m{/etc/nginx/redis/([\w.-]+)}g) {
                    RLTest::write_file("$certs->{dir}/$f", $f =~ /\.pem$|\.crt$/
                        ? RLTest::read_file($certs->{ca}) : "secret\n");
                }
                $text =~ s{/etc/nginx/redis/}{$certs->{dir}/}g;
            }
            my $conf = $t->doc_conf($text);
            my ($rc, $out) = $t->nginx_t($conf);
            is($rc, 0, "$name: nginx -t") or diag("$out\n$conf");
            # h2c is written "listen ... http2", as Debian's nginx (1.22)
            # needs it: nginx 1.25.1 and later take it with this warning
            $out =~ s/^.*\[warn\] the "listen \.\.\. http2" directive is deprecated.*\n?//mg;
            unlike($out, qr/\[warn\]/, "$name: no warning");
        }
    }
}

# --- links and anchors
for my $file (@files) {
    my $text = prose(text_of($file));
    $text =~ s/(`+)(.+?)\1/$2/gs;
    my @links = $text =~ /\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g;
    for my $link (@links) {
        next if $link =~ /^[a-z][a-z0-9+.-]*:/i;   # https:, mailto:
        my ($path, $frag) = $link =~ /^([^#]*)(?:#(.*))?$/;
        my $target = $path eq '' ? $file
            : File::Spec->abs2rel(File::Spec->rel2abs($path, dirname("$root/$file")), $root);
        $target =~ s{/$}{};
        if ($target =~ m{^\.\.(/|$)} || !-e "$root/$target") {
            fail("$file: link $link: $target does not exist");
            next;
        }
        next unless defined $frag;
        if ($target !~ /\.md$/) {
            fail("$file: link $link: an anchor into a file that is not Markdown");
            next;
        }
        my %anchors = map { $_->[2] => 1 } headings($target);
        ok($anchors{$frag}, "$file: link $link: a heading of $target") or diag(
            "anchors of $target: " . join(' ', sort keys %anchors));
    }
}

# --- no section heading twice: within a page (its anchor would be taken),
# nor across pages ("## " and below; a page's title may be a README section's)
{
    my %where;
    for my $file (@files) {
        my %anchors;
        for my $h (headings($file)) {
            my ($level, $title) = @$h;
            push @{ $anchors{ anchor($title) } }, $title;
            push @{ $where{ lc $title } }, $file if $level >= 2;
        }
        my @taken = grep { @{ $anchors{$_} } > 1 } sort keys %anchors;
        is_deeply(\@taken, [], "$file: every heading has an anchor of its own");
    }
    my @twice = grep { @{ $where{$_} } > 1 } sort keys %where;
    is_deeply(\@twice, [], 'no section heading is written twice')
        or diag(join "\n", map { "\"$_\": @{ $where{$_} }" } @twice);
}

# --- every directive and variable of the module is documented
{
    my (@directives, @variables);
    for my $c (sort glob "$root/ngx_module/*.c $root/ngx_module/*/*.c") {
        my $src = RLTest::read_file($c);
        push @directives, $1 =~ /ngx_string\("([^"]+)"\)/g
            while $src =~ /ngx_command_t\s+\w+\[\]\s*=\s*\{(.*?)ngx_null_command/sg;
        push @variables, $1 =~ /ngx_string\("([^"]+)"\)/g
            while $src =~ /ngx_http_variable_t\s+\w+\[\]\s*=\s*\{(.*?)ngx_http_null_variable/sg;
    }
    cmp_ok(scalar @directives, '>=', 10, "the command tables: @directives");
    cmp_ok(scalar @variables, '>=', 8, "the variables' table: @variables");

    my $reference = prose(text_of('docs/directives.md'));
    my %section = map { $_->[1] => $_ } grep { $_->[0] == 2 } headings('docs/directives.md');
    my ($summary) = prose(text_of('README.md')) =~ /^## Directives\n(.*?)(?=^## )/ms;
    for my $d (@directives) {
        my ($body) = $reference =~ /^## \Q$d\E\n(.*?)(?=^## |\z)/ms;
        ok(defined $body, "$d: a section in docs/directives.md") or next;
        like($body, qr/^    Syntax:  \Q$d\E[ ;].*^    Default: .+\n    Context: .+\n    Phase:   .+$/ms,
             "$d: its Syntax, Default, Context and Phase");
        like($summary // '', qr/^\| \[`\Q$d\E`\]\(docs\/directives\.md#\Q$d\E\)[^\n]*\|[^\n]*\|/m,
             "$d: a line in README's summary");
    }
    my %known = map { $_ => 1 } @directives;
    my @stale = grep { /^ratelimit/ && !$known{$_} } keys %section;
    is_deeply(\@stale, [], 'docs/directives.md documents no directive the module lacks');

    my ($vars) = $reference =~ /^## Variables\n(.*?)(?=^## |\z)/ms;
    like($vars // '', qr/^\| `\$\Q$_\E` \|/m, "\$$_: a row in docs/directives.md's variables") for @variables;
}

# --- the version the docs name (the package's file, the stats) is VERSION's
{
    chomp(my $version = RLTest::read_file("$root/VERSION"));
    my @named;
    for my $file (@files) {
        push @named, grep { defined } text_of($file) =~ /libnginx-mod-http-ratelimit_([^_\s]+)_amd64\.deb|"version":"([^"]+)"/g;
    }
    cmp_ok(scalar @named, '>=', 2, 'the docs name the version');
    is_deeply([ grep { $_ ne $version } @named ], [], "and every time it is $version, from VERSION");
}

done_testing();
